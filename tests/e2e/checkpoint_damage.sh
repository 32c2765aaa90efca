#!/usr/bin/env bash
# Damaged checkpoints through the CLI (docs/checkpoints.md, "Damaged checkpoints"). A tiny byte-level GPT (one
# rank, deterministic, a checkpoint every 4 of 12 steps) is copied and its newest checkpoint (step 12) damaged one
# way per copy: a flipped bit in a parameter's bytes, in optimizer state, in a file's header, in index.json (a value
# that still parses: optimizer.steps_done 12 -> 10), the rank file cut short, deleted, index.json removed; one copy
# also holds an unfinished save (.tmp-step_0000013). For each:
#  1. `train --resume auto` skips step 12 with one log line saying why, resumes step 8, keeps the damaged directory
#     byte for byte as damaged-step_0000012, and its 12 losses and final checkpoint file are bit-identical to
#     resuming step 8 by hand;
#  2. `train --resume <step 12>`, `export`, `generate` and `--init-from` of it stop with one error naming the file
#     and what is wrong, writing nothing (export and --init-from read no optimizer state: that copy loads);
#     `export` and `generate` of the checkpoint root read step 12 too (never step 8 in its place) and their error
#     names step 8 with the command that reads it, which then works;
# then every checkpoint damaged: one error listing each, nothing renamed or written; a 2-rank pp2 run whose
# damage only rank 1 reads falls back on both ranks; data.path with synthetic data is refused.
# Usage: checkpoint_damage.sh CLEAVE MPIEXEC [FLAGS...]
source "$(dirname "$0")/checkpoint_setup.sh" "$@"  # cleave, mpiexec, $work, fail, losses, tiny_config
tiny_config model.vocab_size=256 model.n_layers=2 batch.micro_batch_size=4 train.report=false checkpoint.keep_last=3
train() { local log=$1; shift; "$cleave" train tiny.json "$@" > "$log" 2>&1; }
sums() { (cd "$1" && md5sum ./* | sort); }
# flip FILE TENSOR|@OFFSET|@data: one bit flipped in the middle of TENSOR's bytes in a safetensors file, at OFFSET,
# or in the middle of its data section.
flip() {
  python3 - "$1" "$2" << 'PY'
import json, struct, sys
path, where = sys.argv[1], sys.argv[2]
data = bytearray(open(path, "rb").read())
n = struct.unpack("<Q", data[:8])[0]
if where == "@data":  # the middle of the data section
    at = (8 + n + len(data)) // 2
elif where.startswith("@"):
    at = int(where[1:])
else:
    b, e = json.loads(data[8:8 + n])[where]["data_offsets"]
    at = 8 + n + (b + e) // 2
data[at] ^= 1
open(path, "wb").write(data)
PY
}
# flip_index DIR: optimizer.steps_done "12" -> "10" in DIR/index.json (valid JSON, a plausible value).
flip_index() {
  python3 - "$1/index.json" << 'PY'
import sys
p = sys.argv[1]; t = bytearray(open(p, "rb").read())
k = t.index(b'"steps_done": 12') + len(b'"steps_done": 1'); t[k] ^= 2
open(p, "wb").write(t)
PY
}
damage() {  # damage CASE STEP_DIR
  local f="$2/rank_00000.safetensors"
  case $1 in
    param) flip "$f" embed.token ;;
    optimizer) flip "$f" blocks.1.mlp.fc.weight.exp_avg_sq ;;
    header) flip "$f" @100 ;;
    index) flip_index "$2" ;;
    truncated) truncate -s -1000 "$f" ;;
    deleted) rm "$f" ;;
    noindex) rm "$2/index.json" ;;
  esac
}
# What each damage is reported as (a fragment of the skip line and of the readers' errors).
declare -A why=(
  [param]="rank_00000.safetensors: bytes \[[0-9]*, [0-9]*) of tensor embed.token (embed.token) fail their checksum"
  [optimizer]="rank_00000.safetensors: bytes \[[0-9]*, [0-9]*) of tensor blocks.1.mlp.fc.weight.exp_avg_sq .* fail their checksum"
  [header]="rank_00000.safetensors: checksum fnv1a64:[0-9a-f]* of its [0-9]*-byte header does not match"
  [index]="index.json: index_checksum: \"fnv1a64:[0-9a-f]*\" does not match the index's content"
  [truncated]="rank_00000.safetensors has [0-9]* bytes, index.json records [0-9]* (truncated or replaced)"
  [deleted]="rank_00000.safetensors is missing"
  [noindex]="no index.json"
)

train ref.log --set train.out_dir=ref || { cat ref.log; fail "reference run"; }
cp -r ref hand
train hand.log --set train.out_dir=hand --resume hand/checkpoints/step_0000008 || { cat hand.log; fail "by-hand resume"; }

for c in param optimizer header index truncated deleted noindex; do
  cp -r ref "$c"
  damage "$c" "$c/checkpoints/step_0000012"
  [ "$c" = param ] && mkdir "$c/checkpoints/.tmp-step_0000013" && head -c 5000 ref/checkpoints/step_0000012/rank_00000.safetensors \
    > "$c/checkpoints/.tmp-step_0000013/rank_00000.safetensors"
  before=$(sums "$c/checkpoints/step_0000012")
  # The readers of that one checkpoint stop, naming what is wrong; nothing is written or renamed.
  rows=$(md5sum < "$c/metrics.jsonl")
  train "$c.path.log" --set train.out_dir="$c" --resume "$c/checkpoints/step_0000012" && fail "$c: --resume of it loaded"
  grep -q "error: --resume $c/checkpoints/step_0000012: the checkpoint is damaged: .*${why[$c]}.*--resume auto, which falls back" \
    "$c.path.log" || { cat "$c.path.log"; fail "$c: the --resume PATH error"; }
  [ "$rows" = "$(md5sum < "$c/metrics.jsonl")" ] && [ -d "$c/checkpoints/step_0000012" ] || fail "$c: a refused resume wrote"
  "$cleave" generate "$c/checkpoints/step_0000012" --prompt hi --tokens 2 > "$c.gen.log" 2>&1 && fail "$c: generate loaded it"
  grep -q "error: .*${why[$c]}" "$c.gen.log" || { cat "$c.gen.log"; fail "$c: the generate error"; }
  for reader in export init; do
    if [ $reader = export ]; then "$cleave" export "$c/checkpoints/step_0000012" --out "$c.st" > "$c.$reader.log" 2>&1
    else train "$c.$reader.log" --set train.out_dir="$c.init" --set train.steps=1 --init-from "$c/checkpoints/step_0000012"; fi
    rc=$?
    if [ "$c" = optimizer ]; then  # parameters only: the damaged moment is never read
      [ $rc = 0 ] || { cat "$c.$reader.log"; fail "$c: $reader failed on intact parameters"; }
    else
      [ $rc != 0 ] && grep -q "error: .*${why[$c]}" "$c.$reader.log" || { cat "$c.$reader.log"; fail "$c: the $reader error"; }
    fi
  done
  # export and generate of the root read its newest checkpoint (step 12), never step 8 in its place: the error
  # names step 8 and the command that reads it, which works (export reads no optimizer state: that copy exports).
  "$cleave" export "$c/checkpoints" --out "$c.root.st" > "$c.rootexp.log" 2>&1
  rc=$?
  if [ "$c" = optimizer ]; then
    [ $rc = 0 ] && grep -q "step_0000012 -> $c.root.st" "$c.rootexp.log" || { cat "$c.rootexp.log"; fail "$c: export of the root"; }
  else
    [ $rc != 0 ] && [ ! -e "$c.root.st" ] \
      && grep -q "error: export: the newest checkpoint under $c/checkpoints is damaged: .*${why[$c]}.*nothing older was read in its place. The newest older checkpoint that passes the quick check .* is $c/checkpoints/step_0000008: cleave export $c/checkpoints/step_0000008 --out $c.root.st\$" \
      "$c.rootexp.log" || { cat "$c.rootexp.log"; fail "$c: the export error for the root"; }
    suggested=$(grep -o "cleave export $c/checkpoints/step_0000008 .*" "$c.rootexp.log")
    "$cleave" ${suggested#cleave } > "$c.suggested.log" 2>&1 && [ -f "$c.root.st" ] || { cat "$c.suggested.log"; fail "$c: the suggested export"; }
  fi
  "$cleave" generate "$c/checkpoints" --prompt 'a b' --tokens 2 > "$c.rootgen.log" 2>&1 && fail "$c: generate of the root loaded"
  grep -q "error: generate: the newest checkpoint under $c/checkpoints is damaged: .*${why[$c]}.* is $c/checkpoints/step_0000008: cleave generate $c/checkpoints/step_0000008 --prompt 'a b' --tokens 2\$" \
    "$c.rootgen.log" || { cat "$c.rootgen.log"; fail "$c: the generate error for the root"; }
  # --resume auto falls back to step 8, says so once, keeps the damaged checkpoint as it was.
  train "$c.auto.log" --set train.out_dir="$c" --resume auto || { cat "$c.auto.log"; fail "$c: --resume auto did not fall back"; }
  [ "$(grep -c "skipped step_0000012" "$c.auto.log")" = 1 ] \
    && grep -q "warning: checkpoint: --resume skipped step_0000012 (step 12), damaged: .*${why[$c]}.*; kept unchanged as $c/checkpoints/damaged-step_0000012" \
    "$c.auto.log" || { cat "$c.auto.log"; fail "$c: the skip line"; }
  grep -q "resumed from $c/checkpoints/step_0000008 (step 8;" "$c.auto.log" || { cat "$c.auto.log"; fail "$c: not resumed at 8"; }
  if [ "$c" = param ]; then
    grep -q "skipped .tmp-step_0000013 (step 13): an unfinished save" "$c.auto.log" || { cat "$c.auto.log"; fail "unfinished save"; }
  fi
  [ "$before" = "$(sums "$c/checkpoints/damaged-step_0000012")" ] || fail "$c: the damaged checkpoint was changed"
  [ "$(cat "$c/checkpoints/latest")" = step_0000012 ] && [ -f "$c/checkpoints/step_0000012/index.json" ] || fail "$c: no new step 12"
  diff <(losses hand) <(losses "$c") > /dev/null || { paste <(losses hand) <(losses "$c"); fail "$c: losses differ from the by-hand resume"; }
  cmp -s hand/checkpoints/step_0000012/rank_00000.safetensors "$c/checkpoints/step_0000012/rank_00000.safetensors" \
    || fail "$c: the final checkpoint differs from the by-hand resume's"
  echo "ok   $c: $(grep -o 'damaged: .*' "$c.auto.log" | cut -c1-110)"
done
diff <(losses ref) <(losses hand) > /dev/null || fail "the by-hand resume differs from the uninterrupted run"
echo "ok   every copy resumed from step 8 with losses and final checkpoint bit-identical to the by-hand resume (and the uninterrupted run)"

# Every checkpoint damaged: one error listing each and why; nothing renamed, nothing written.
cp -r ref all
for s in 0000004 0000008 0000012; do flip "all/checkpoints/step_$s/rank_00000.safetensors" embed.token; done
listing=$(ls -A all/checkpoints); rows=$(md5sum < all/metrics.jsonl)
train all.log --set train.out_dir=all --resume auto && fail "all damaged: resumed"
grep -q "error: --resume auto: no intact checkpoint under all/checkpoints: step_0000012 (step 12): .*fail their checksum.*; step_0000008 (step 8): .*; step_0000004 (step 4): .*nothing was loaded, renamed or written" all.log \
  || { cat all.log; fail "all damaged: the error"; }
[ "$listing" = "$(ls -A all/checkpoints)" ] && [ "$rows" = "$(md5sum < all/metrics.jsonl)" ] || fail "all damaged: something was written"
echo "ok   every checkpoint damaged: $(grep -o 'error: [^:]*: [^:]*' all.log)"

# Two ranks (pp2): the damage is in rank 1's file, which only rank 1 reads; both ranks fall back together.
"${mpiexec[@]}" -n 2 "$cleave" train tiny.json --set parallel.pipeline_model_parallel_size=2 --set train.out_dir=pp > pp.log 2>&1 \
  || { cat pp.log; fail "pp2 run"; }
losses pp > pp.losses
flip pp/checkpoints/step_0000012/rank_00001.safetensors @data
"${mpiexec[@]}" -n 2 "$cleave" train tiny.json --set parallel.pipeline_model_parallel_size=2 --set train.out_dir=pp \
  --resume auto > pp.auto.log 2>&1 || { cat pp.auto.log; fail "pp2: --resume auto"; }
grep -q "skipped step_0000012 (step 12), damaged: rank 1: checkpoint file pp/checkpoints/step_0000012/rank_00001.safetensors" pp.auto.log \
  && grep -q "resumed from pp/checkpoints/step_0000008" pp.auto.log || { cat pp.auto.log; fail "pp2: the fallback"; }
diff pp.losses <(losses pp) > /dev/null || fail "pp2: losses differ from the uninterrupted pp2 run"
echo "ok   pp2: rank 1's damage skipped on both ranks; resumed from step 8, losses bit-identical to the uninterrupted run"

# data.path beside synthetic data: refused before any work, naming both keys and the fixes.
train synth.log --set train.out_dir=synth --set data.path=corpus.txt && fail "data.path with synthetic data was accepted"
grep -q 'data.path: "corpus.txt" is set, but data.type is "synthetic" .*set data.type to "text" or "tokens".*--set data.path=' synth.log \
  || { cat synth.log; fail "the data.path refusal"; }
[ ! -e synth ] || fail "the refused run wrote synth/"
echo "ok   $(grep -o 'data.path: .*' synth.log | cut -c1-120)"
