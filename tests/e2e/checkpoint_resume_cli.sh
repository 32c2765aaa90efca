#!/usr/bin/env bash
# Checkpoints through the CLI (deterministic mode, AdamW, clipping, tied embeddings):
#  1. `cleave train` with checkpoint.interval 4 over 12 steps writes step_0000004, step_0000008 and the
#     final step_0000012 (keep_last 3), a `latest` pointer and index.json with checksums.
#  2. A copy of that run cut back to step 4 (later checkpoints removed, as after a crash) resumed with
#     `--resume auto` writes the same 12 metrics rows (no duplicated step) with bit-identical losses, and a
#     final checkpoint whose parameter and optimizer files are byte-identical to the uninterrupted run's.
#     Done on one rank and on tp2 x pp2 (4 ranks); the 4-rank checkpoint at step 4 also resumes on one rank
#     with the uninterrupted losses within 1e-5 relative (resharding through the CLI).
#  3. The out_dir refusal still holds without --resume; --resume auto over a run with no checkpoint starts fresh
#     with the earlier attempt's files kept in earlier_attempt_1/; a corrupt (only) checkpoint is refused before any step,
#     naming the file, and writes nothing (metrics.jsonl unchanged, no new checkpoint); so is a resume that
#     changes a training key (optimizer.lr) unless --allow-config-change names it, and then it is recorded.
#  4. The run's config.json names its data by absolute path (a --set value's and a config file's relative paths):
#     trained from another directory it reads the same files.
#  5. A MoE resume may change model.aux_loss_coef only with --allow-config-change, and then uses the new value;
#     --init-from takes a new one from the config.
# Usage: checkpoint_resume_cli.sh CLEAVE MPIEXEC [FLAGS...]
source "$(dirname "$0")/checkpoint_setup.sh" "$@"  # cleave, mpiexec, $work, fail, losses, tiny_config
tiny_config checkpoint.keep_last=3
train() {  # train RANKS LOG ARGS...
  local ranks=$1 log=$2; shift 2
  if [ "$ranks" -eq 1 ]; then "$cleave" train tiny.json "$@" > "$log" 2>&1
  else "${mpiexec[@]}" -n "$ranks" "$cleave" train tiny.json "$@" > "$log" 2>&1; fi
}

check_layout() {  # check_layout NAME RANKS SETS...
  local name=$1 ranks=$2; shift 2
  train "$ranks" "$name.log" --set train.out_dir="$name" "$@" || { cat "$name.log"; fail "$name: training failed"; }
  for s in 0000004 0000008 0000012; do
    [ -f "$name/checkpoints/step_$s/index.json" ] || fail "$name: no complete checkpoint step_$s"
  done
  [ "$(cat "$name/checkpoints/latest")" = "step_0000012" ] || fail "$name: latest is $(cat "$name/checkpoints/latest")"
  grep -q '"checksum": "fnv1a64:' "$name/checkpoints/step_0000012/index.json" || fail "$name: index.json has no checksums"
  grep -q "checkpoint: step 12 saved to" "$name.log" || fail "$name: the save is not logged"
  grep "checkpoint: step 12 saved" "$name.log" | sed 's/^/     /'

  # The crash: a copy of the run with everything after step 4 gone (checkpoints, pointer).
  cp -r "$name" "$name-cut"
  rm -rf "$name-cut/checkpoints/step_0000008" "$name-cut/checkpoints/step_0000012" "$name-cut/checkpoints/latest"
  train "$ranks" "$name-cut.log" --set train.out_dir="$name-cut" --resume auto "$@" \
    || { cat "$name-cut.log"; fail "$name: resume failed"; }
  grep -q "resumed from .*step_0000004 (step 4;" "$name-cut.log" || { cat "$name-cut.log"; fail "$name: did not resume at step 4"; }
  grep -q "done: 8 steps (5 to 12, resumed at step 4) in" "$name-cut.log" \
    || { cat "$name-cut.log"; fail "$name: the final line does not count only the 8 steps this run ran"; }
  [ "$(wc -l < "$name-cut/metrics.jsonl")" -eq 12 ] || fail "$name: resumed metrics.jsonl has $(wc -l < "$name-cut/metrics.jsonl") rows, expected 12"
  [ "$(sed 's/.*"step":\([0-9]*\),.*/\1/' "$name-cut/metrics.jsonl" | tr '\n' ' ')" = "1 2 3 4 5 6 7 8 9 10 11 12 " ] \
    || fail "$name: resumed metrics steps are not 1..12"
  if ! diff <(losses "$name") <(losses "$name-cut") > /dev/null; then
    paste <(losses "$name") <(losses "$name-cut"); fail "$name: resumed losses differ from the uninterrupted run"
  fi
  for f in "$name"/checkpoints/step_0000012/*.safetensors; do
    cmp -s "$f" "$name-cut/checkpoints/step_0000012/$(basename "$f")" || fail "$name: final $(basename "$f") differs"
  done
  echo "ok   $name: resumed at step 4, 12 losses and the final checkpoint's files bit-identical"
}

check_layout one 1
check_layout tp2pp2 4 --set parallel.tensor_model_parallel_size=2 --set parallel.pipeline_model_parallel_size=2

# Resharding through the CLI: the tp2 x pp2 checkpoint of step 4 continued on one rank.
mkdir -p reshard/checkpoints && cp -r tp2pp2/checkpoints/step_0000004 reshard/checkpoints/
train 1 reshard.log --set train.out_dir=reshard --resume reshard/checkpoints/step_0000004 \
  || { cat reshard.log; fail "reshard: resume on one rank failed"; }
paste <(losses tp2pp2 | tail -n 8) <(losses reshard) | awk '{ d = ($1 - $2) / $1; if (d < 0) d = -d; if (d > 1e-5) exit 1 }' \
  || { paste <(losses tp2pp2 | tail -n 8) <(losses reshard); fail "reshard: losses differ by more than 1e-5"; }
echo "ok   reshard: tp2 x pp2 step-4 checkpoint continued on one rank within 1e-5 of the 4-rank run"

# Without --resume an existing run is still refused.
train 1 refuse.log --set train.out_dir=one && fail "a second run into one/ was not refused"
grep -q "already holds a run" refuse.log || { cat refuse.log; fail "refusal message"; }

# --resume auto over a run that wrote no checkpoint starts fresh and replaces nothing: the earlier attempt's run
# files move to earlier_attempt_1/ (a run directory cleave report reads).
train 1 nockpt.log --set train.out_dir=nockpt --set train.steps=3 --set checkpoint.interval=0 \
  --set checkpoint.save_final=false || { cat nockpt.log; fail "a run without checkpoints"; }
before=$(md5sum < nockpt/metrics.jsonl)
train 1 nockpt2.log --set train.out_dir=nockpt --set train.steps=2 --set checkpoint.interval=0 \
  --set checkpoint.save_final=false --resume auto || { cat nockpt2.log; fail "--resume auto without a checkpoint"; }
grep -q "fresh start; the earlier attempt's run files .* are kept in nockpt/earlier_attempt_1" nockpt2.log \
  || { cat nockpt2.log; fail "the fresh start does not say where the earlier files are"; }
[ "$before" = "$(md5sum < nockpt/earlier_attempt_1/metrics.jsonl)" ] || fail "the earlier metrics.jsonl was not kept whole"
[ -f nockpt/earlier_attempt_1/run.json ] && [ -f nockpt/earlier_attempt_1/config.json ] || fail "run.json/config.json not kept"
[ "$(wc -l < nockpt/metrics.jsonl)" -eq 2 ] || fail "the fresh start's metrics.jsonl"
echo "ok   --resume auto without a checkpoint: a fresh start, the earlier attempt kept in nockpt/earlier_attempt_1"
# --resume of a finished run (its checkpoint holds train.steps): nothing runs and nothing is rewritten (run.json kept
# the 0-step run's peak memory over the run's own).
before=$(md5sum one/run.json one/metrics.jsonl one/config.json one/report.html)
train 1 done.log --set train.out_dir=one --resume auto || { cat done.log; fail "--resume of a finished run"; }
grep -q "holds step 12, which is train.steps: the run is complete; nothing was run or written" done.log \
  || { cat done.log; fail "the finished run's resume does not say so"; }
[ "$before" = "$(md5sum one/run.json one/metrics.jsonl one/config.json one/report.html)" ] \
  || fail "the finished run's files were rewritten"
echo "ok   --resume of a finished run: nothing run, nothing rewritten"

# A corrupt checkpoint: refused before any step, names the file, writes nothing.
cp -r one broken
rm -rf broken/checkpoints/step_0000008 broken/checkpoints/step_0000012 broken/checkpoints/latest
printf '\x01' | dd of=broken/checkpoints/step_0000004/rank_00000.safetensors bs=1 seek=300 conv=notrunc 2> /dev/null
before=$(md5sum broken/metrics.jsonl)
train 1 broken.log --set train.out_dir=broken --resume auto && fail "a corrupt checkpoint was loaded"
grep -q "rank_00000.safetensors: checksum" broken.log || { cat broken.log; fail "corrupt checkpoint message"; }
[ "$before" = "$(md5sum broken/metrics.jsonl)" ] || fail "a failed resume changed metrics.jsonl"
[ -z "$(ls broken/checkpoints | grep -v step_0000004)" ] || fail "a failed resume wrote a checkpoint"
echo "ok   corrupt checkpoint refused before any step: $(grep -o 'checkpoint file.*' broken.log | head -n 1)"

# An index.json cut short (the latest checkpoint's): --resume of it is one error naming the file and --resume auto,
# not the JSON parser's bare text, with nothing written; --resume auto falls back to step 8 (tests/e2e/checkpoint_damage.sh
# covers the fallback in full).
cp -r one cutindex
head -c 100 one/checkpoints/step_0000012/index.json > cutindex/checkpoints/step_0000012/index.json
before=$(md5sum cutindex/metrics.jsonl)
train 1 cutindex.log --set train.out_dir=cutindex --set train.steps=14 --resume cutindex/checkpoints/step_0000012 \
  && fail "a cut index.json was loaded"
grep -q "error: --resume cutindex/checkpoints/step_0000012: the checkpoint is damaged: checkpoint index cutindex/checkpoints/step_0000012/index.json: does not parse (.*--resume auto" \
  cutindex.log || { cat cutindex.log; fail "cut index.json message"; }
[ "$before" = "$(md5sum cutindex/metrics.jsonl)" ] || fail "a failed resume changed metrics.jsonl"
echo "ok   cut index.json refused: $(grep -o 'error: .*' cutindex.log | cut -c1-120)"
train 1 cutauto.log --set train.out_dir=cutindex --set train.steps=14 --resume auto || { cat cutauto.log; fail "no fallback"; }
grep -q "resumed from cutindex/checkpoints/step_0000008" cutauto.log || { cat cutauto.log; fail "cut index.json: no fallback to step 8"; }
echo "ok   --resume auto fell back: $(grep -o 'skipped step_0000012 .*' cutauto.log | cut -c1-100)"

# A model key changed on resume: the loader refuses it; the change is listed, but never as "allowed by
# --allow-config-change" when no such flag was given.
cp -r one remodel
train 1 remodel.log --set train.out_dir=remodel --set model.d_model=16 --set train.steps=14 --resume auto \
  && fail "a resume with another d_model was accepted"
grep -q "saved from a different model: .*model.d_model: 32 in the checkpoint, 16 in the config" remodel.log \
  || { cat remodel.log; fail "changed-model message"; }
! grep -q "allowed by --allow-config-change" remodel.log || { cat remodel.log; fail "a refused model change was logged as allowed"; }
echo "ok   a changed model key is refused and not logged as allowed"

# A resume that would not continue the run's random streams: another seed, another global batch. Refused
# with the key and the value that continues it; nothing written.
cp -r one reseed
before=$(md5sum reseed/metrics.jsonl)
train 1 reseed.log --set train.out_dir=reseed --set train.seed=8 --resume reseed/checkpoints/step_0000004 \
  && fail "a resume with another train.seed was accepted"
grep -q "drawn with train.seed 7, the config has 8; set train.seed=7" reseed.log || { cat reseed.log; fail "seed message"; }
train 1 rebatch.log --set train.out_dir=reseed --set batch.global_batch_size=4 --set batch.micro_batch_size=2 \
  --resume reseed/checkpoints/step_0000004 && fail "a resume with another global batch was accepted"
grep -q "batch.global_batch_size is 4; set batch.global_batch_size=8" rebatch.log || { cat rebatch.log; fail "batch message"; }
[ "$before" = "$(md5sum reseed/metrics.jsonl)" ] || fail "a refused resume changed metrics.jsonl"
grep -q '"scheme": "counter"' one/checkpoints/step_0000012/index.json || fail "index.json has no rng state"
echo "ok   a resume with another seed or global batch is refused: $(grep -o 'the checkpoint.s data streams.*' reseed.log | head -n 1)"

# A resume with a changed training key (optimizer.lr): refused naming the key, both values and the flag,
# nothing written; allowed by name, it trains and is recorded: run.json "resumes", the first row after the
# resume ("resumed_at_step", "config_changes"), the old config.json kept as config.before_step_4.json. A key
# that changes freely (train.steps) needs no flag and is recorded too.
cp -r one relr
rm -rf relr/checkpoints/step_0000008 relr/checkpoints/step_0000012 relr/checkpoints/latest
before=$(md5sum relr/metrics.jsonl relr/config.json)
train 1 relr.log --set train.out_dir=relr --set optimizer.lr=0.001 --resume auto && fail "a resume with another lr was accepted"
grep -q "the config differs from the one the checkpoint was trained with: optimizer.lr 0.003 -> 0.001; .*--allow-config-change optimizer.lr.*--set optimizer.lr=0.003" relr.log \
  || { cat relr.log; fail "changed-lr message"; }
[ "$before" = "$(md5sum relr/metrics.jsonl relr/config.json)" ] || fail "a refused resume changed metrics.jsonl or config.json"
[ -z "$(ls relr/checkpoints | grep -v step_0000004)" ] && [ ! -e relr/config.before_step_4.json ] || fail "a refused resume wrote files"
train 1 relr2.log --set train.out_dir=relr --set optimizer.lr=0.001 --set train.steps=14 --resume auto \
  --allow-config-change optimizer.lr || { cat relr2.log; fail "a resume with an allowed lr change failed"; }
grep -q "resume: config changed since the checkpoint: optimizer.lr 0.003 -> 0.001 (allowed by --allow-config-change)" relr2.log \
  || { cat relr2.log; fail "the allowed change is not logged"; }
python3 - relr << 'PY' || fail "the allowed change is not recorded"
import json, sys
d = sys.argv[1]
run = json.load(open(f"{d}/run.json"))
assert len(run["resumes"]) == 1 and run["resumes"][0]["at_step"] == 4, run["resumes"]
changes = {c["key"]: c for c in run["resumes"][0]["config_changes"]}
assert changes["optimizer.lr"]["before"] == "0.003" and changes["optimizer.lr"]["after"] == "0.001", changes
assert changes["optimizer.lr"]["allowed_by"] == "--allow-config-change", changes
assert changes["train.steps"]["allowed_by"] == "resume" and changes["train.steps"]["after"] == "14", changes
rows = [json.loads(l) for l in open(f"{d}/metrics.jsonl")]
assert [r["step"] for r in rows] == list(range(1, 15))
marked = [r for r in rows if "resumed_at_step" in r]
assert len(marked) == 1 and marked[0]["step"] == 5 and marked[0]["resumed_at_step"] == 4, marked
assert marked[0]["config_changes"] == len(changes)
assert json.load(open(f"{d}/config.before_step_4.json"))["optimizer"]["lr"] == 0.003
assert json.load(open(f"{d}/config.json"))["optimizer"]["lr"] == 0.001
html = open(f"{d}/report.html").read()
assert 'class="xmarker"' in html and "at step 4 from" in html, "report.html does not mark the resume"
PY
echo "ok   a changed optimizer.lr on resume: refused without the flag, recorded with it"

# Export: the one-rank final checkpoint and the tp2 x pp2 one, each consolidated into one file; parsed here
# by an independent reader (python: length, JSON header, packed offsets). The one-rank export's tensors are
# byte-identical to the rank file's; the tp2 x pp2 export has the same names and shapes (its shards placed).
"$cleave" export one/checkpoints --out one.safetensors > export1.log 2>&1 || { cat export1.log; fail "export one"; }
"$cleave" export tp2pp2/checkpoints/step_0000012 --out tp.safetensors > export2.log 2>&1 || { cat export2.log; fail "export tp2pp2"; }
"$cleave" export one/checkpoints --out one.safetensors > export3.log 2>&1 && fail "export overwrote an existing file"
"$cleave" export one/checkpoints --out one16.safetensors --dtype bf16 > export4.log 2>&1 || { cat export4.log; fail "export bf16"; }
# An --out in directories that do not exist yet: the check before the work allows it, so the export creates them.
"$cleave" export one/checkpoints --out new/dir/one.safetensors > export5.log 2>&1 && cmp -s one.safetensors new/dir/one.safetensors \
  || { cat export5.log; fail "export into a new directory"; }
python3 - one.safetensors tp.safetensors one/checkpoints/step_0000012/rank_00000.safetensors one16.safetensors <<'PY' || fail "export check"
import json, struct, sys
def parse(path):
    data = open(path, "rb").read()
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + n])
    meta = header.pop("__metadata__", {})
    body = data[8 + n:]
    ranges = sorted((v["data_offsets"][0], v["data_offsets"][1], k) for k, v in header.items())
    pos = 0
    for b, e, k in ranges:
        assert b == pos, f"{path}: {k} starts at {b}, expected {pos}"
        size = {"F32": 4, "BF16": 2}[header[k]["dtype"]]
        numel = 1
        for d in header[k]["shape"]: numel *= d
        assert e - b == numel * size, f"{path}: {k} spans {e - b} bytes for shape {header[k]['shape']}"
        pos = e
    assert pos == len(body), f"{path}: data {len(body)} bytes, covered {pos}"
    return header, meta, {k: body[v["data_offsets"][0]:v["data_offsets"][1]] for k, v in header.items()}
one, meta, one_bytes = parse(sys.argv[1])
tp, _, _ = parse(sys.argv[2])
rank, _, rank_bytes = parse(sys.argv[3])
half, meta16, _ = parse(sys.argv[4])
assert meta["format"] == "cleave-export" and meta["step"] == "12", meta
assert json.loads(meta["model"])["d_model"] == 32, meta["model"]
assert "embed.token" in one and one["embed.token"]["shape"] == [64, 32], one.get("embed.token")
assert {k: v["shape"] for k, v in one.items()} == {k: v["shape"] for k, v in tp.items()}, "names or shapes differ"
assert all(v["dtype"] == "BF16" for v in half.values()) and meta16["dtype"] == "bf16"
for k, v in one_bytes.items():
    assert rank_bytes[k] == v, f"{k}: exported bytes differ from the checkpoint's"
print(f"ok   export: {len(one)} parameters; one-rank export equals the checkpoint bytes; tp2 x pp2 export has the same names and shapes; bf16 export parses")
PY

# 4. The run's config.json names its input files by absolute path, so training that file from another directory reads
#    the same data as the original command: data.path given by --set (relative to the working directory) and
#    data.val_path by a config file in conf/ (relative to conf/). Before, the --set path was written as given and so
#    resolved against the run directory (paths/text/corpus.txt: no such file) when paths/config.json was trained.
mkdir -p conf text elsewhere
python3 -c "print('the quick brown fox jumps over the lazy dog. ' * 400)" > text/corpus.txt
cat > conf/text.json <<'JSON'
{"model": {"type": "gpt", "vocab_size": 256, "d_model": 16, "n_layers": 1, "n_heads": 2, "seq_len": 16},
 "batch": {"global_batch_size": 4, "micro_batch_size": 2},
 "train": {"steps": 2, "eval_batches": 0, "log_interval": 100, "report": false},
 "data": {"type": "text", "val_path": "../text/corpus.txt"}}
JSON
"$cleave" train conf/text.json --set data.path=text/corpus.txt --set train.out_dir=paths > paths.log 2>&1 \
  || { cat paths.log; fail "training with relative data paths"; }
(cd elsewhere && "$cleave" train ../paths/config.json --set train.out_dir=again > again.log 2>&1) \
  || { cat elsewhere/again.log; fail "training the run's config.json from another directory"; }
python3 - "$work" << 'PY' || fail "the run's config.json does not name the data by absolute path"
import json, os, sys
want = os.path.join(os.path.realpath(sys.argv[1]), "text", "corpus.txt")
for run in ("paths", "elsewhere/again"):
    data = json.load(open(os.path.join(run, "config.json")))["data"]
    assert os.path.realpath(data["path"]) == want and os.path.isabs(data["path"]), (run, data["path"])
    assert os.path.realpath(data["val_path"]) == want and os.path.isabs(data["val_path"]), (run, data["val_path"])
print(f"ok   paths: config.json names {want} (from --set and from conf/text.json); trained from another directory")
PY

# 5. The MoE loss coefficients are training arguments (engine/config/model_training_keys.hpp): a resume that changes
#    model.aux_loss_coef is refused without --allow-config-change, naming the key and both values (an architecture
#    key, model.top_k, stays refused by the loader even with its flag entry refused); with the flag the new
#    coefficient is used: the logged moe_aux_loss (coefficient included) is ~10x the last step's before the resume.
cat > moe.json <<'JSON'
{"model": {"type": "moe", "vocab_size": 64, "d_model": 16, "n_layers": 1, "n_heads": 2, "seq_len": 8,
           "ffn_hidden_size": 16, "n_experts": 4, "top_k": 2, "aux_loss_coef": 0.01},
 "batch": {"global_batch_size": 4, "micro_batch_size": 2},
 "train": {"steps": 2, "seed": 3, "eval_batches": 0, "log_interval": 100, "report": false},
 "checkpoint": {"interval": 2}, "data": {"type": "synthetic"}}
JSON
"$cleave" train moe.json --set train.out_dir=moe > moe.log 2>&1 || { cat moe.log; fail "moe run"; }
"$cleave" train moe.json --set train.out_dir=moe --set train.steps=4 --set model.aux_loss_coef=0.1 --resume auto \
  > moe_refused.log 2>&1 && fail "a resume with another aux_loss_coef was accepted without the flag"
grep -q "the config differs from the one the checkpoint was trained with: model.aux_loss_coef 0.01 -> 0.1; .*--allow-config-change model.aux_loss_coef" moe_refused.log \
  || { cat moe_refused.log; fail "changed aux_loss_coef message"; }
"$cleave" train moe.json --set train.out_dir=moe --set train.steps=4 --set model.top_k=1 --resume auto \
  --allow-config-change model.top_k > moe_topk.log 2>&1; rc=$?
[ $rc -eq 64 ] && grep -q "'model.top_k' cannot change on a resume" moe_topk.log || { cat moe_topk.log; fail "model.top_k in the flag (exit $rc)"; }
"$cleave" train moe.json --set train.out_dir=moe --set train.steps=4 --set model.aux_loss_coef=0.1 --resume auto \
  --allow-config-change model.aux_loss_coef > moe_allowed.log 2>&1 || { cat moe_allowed.log; fail "an allowed aux_loss_coef change"; }
grep -q "resume: config changed since the checkpoint: model.aux_loss_coef 0.01 -> 0.1 (allowed by --allow-config-change)" moe_allowed.log \
  || { cat moe_allowed.log; fail "the allowed aux_loss_coef change is not logged"; }
python3 - << 'PY' || fail "the new aux_loss_coef is not the one used"
import json
rows = [json.loads(l) for l in open("moe/metrics.jsonl")]
assert [r["step"] for r in rows] == [1, 2, 3, 4], [r["step"] for r in rows]
ratio = rows[2]["moe_aux_loss"] / rows[1]["moe_aux_loss"]
assert 5 < ratio < 20, (ratio, [r["moe_aux_loss"] for r in rows])
assert json.load(open("moe/config.json"))["model"]["aux_loss_coef"] == 0.1
print(f"ok   moe: aux_loss_coef 0.01 -> 0.1 refused without the flag, used with it (moe_aux_loss x{ratio:.2f} at step 3)")
PY
# --init-from takes a new coefficient as it takes a new optimizer.lr (the weights' value is only the default); an
# architecture key that differs from the weights' is still refused as bad input.
"$cleave" train moe.json --init-from moe/checkpoints --set model.aux_loss_coef=0.05 --set train.out_dir=moe_ft \
  > moe_ft.log 2>&1 || { cat moe_ft.log; fail "--init-from with another aux_loss_coef"; }
python3 -c "import json; assert json.load(open('moe_ft/config.json'))['model']['aux_loss_coef'] == 0.05" \
  || fail "--init-from did not take the config's aux_loss_coef"
"$cleave" train moe.json --init-from moe/checkpoints --set model.top_k=1 --set train.out_dir=moe_ft2 > moe_ft2.log 2>&1
rc=$?
[ $rc -eq 64 ] && grep -q "model.top_k is 1 in " moe_ft2.log || { cat moe_ft2.log; fail "--init-from with another top_k (exit $rc)"; }
echo "ok   moe: --init-from takes aux_loss_coef 0.05 from the config and refuses another model.top_k"
