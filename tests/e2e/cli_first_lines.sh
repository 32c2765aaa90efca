#!/usr/bin/env bash
# The first lines of every command whose texts and checks issue 32 corrected, compared line by line with what
# they must say (numbers written as N, "warning:" lines left out, so a timing or a machine note never fails it):
#  - train: "1 stage" (never "1 stages"), the model-FLOPs line, gnorm / TFLOP/s / MFU on the step line, the
#    non-finite counts in the summary; a resumed run's metrics.jsonl has an integer resumed_at_step;
#  - generate and export of a trained and of an imported (weights-only) checkpoint say "loaded", never "resumed
#    from" or "optimizer starts fresh"; generate of a Hugging Face directory points to cleave import;
#  - checks before work: checkpoint.dir or train.out_dir that is (or lies under) a file, generate --logits,
#    export --out and import --out under a file, NaN weights at import and at train --init-from: each one error
#    line naming the key or option and the path (or the tensor), before any step or load, nothing written.
#  - train --help: the usage line, every option, exit 0, nothing trained.
# Usage: cli_first_lines.sh CLEAVE SOURCE_DIR
set -u
cleave=$1
src=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
failures=0

# The first N lines of FILE, warnings left out, every number as N (rates with their unit's prefix: N tok/s,
# N FLOP/s, whatever this machine's speed).
first_lines() {
  # The `cpu:` line (the CPU and its BLAS kernels, docs/ops.md) names the machine; it is not part of the texts checked.
  grep -av -e '^warning: ' -e '^cpu: ' "$2" | sed -E -e 's/[0-9]+(\.[0-9]+)?(e[-+]?[0-9]+)?/N/g' -e 's/N[kM] tok\/s/N tok\/s/g' \
    -e 's/N [MGT]FLOP\/s/N FLOP\/s/g' | head -n "$1"
}

# expect NAME LOG < expected lines: the first lines of LOG must be these (in first_lines' form).
expect() {
  local name=$1 log=$2 want got
  want=$(cat)
  got=$(first_lines "$(printf '%s\n' "$want" | wc -l)" "$log")
  if [ "$got" == "$want" ]; then
    echo "ok   $name"
  else
    echo "FAIL $name: the first lines differ (- expected, + got):"
    diff <(printf '%s\n' "$want") <(printf '%s\n' "$got") | sed 's/^/    /'
    failures=$((failures + 1))
  fi
}

# refuse NAME LOG PATH: the command failed, its log has no step or load line, and PATH was not created.
refuse() {
  local name=$1 status=$2 log=$3 path=$4
  if [ "$status" -eq 0 ]; then echo "FAIL $name: exit 0"; failures=$((failures + 1)); fi
  if grep -Eq '^step |^checkpoint: (loaded|resumed)|^init: ' "$log"; then
    echo "FAIL $name: worked before refusing:"; sed 's/^/    /' "$log"; failures=$((failures + 1))
  fi
  if [ -e "$path" ]; then echo "FAIL $name: $path was written"; failures=$((failures + 1)); fi
}

# never NAME LOG REGEX: no line of LOG matches.
never() {
  if grep -aEq -- "$3" "$2"; then
    echo "FAIL $1: says /$3/:"; grep -aE -- "$3" "$2" | sed 's/^/    /'; failures=$((failures + 1))
  fi
}

tiny=(--set model.d_model=32 --set model.n_layers=2 --set model.seq_len=16 --set batch.global_batch_size=4
      --set batch.micro_batch_size=4 --set train.eval_batches=0 --set train.log_interval=1 --set train.report=false)

# train --help: the help text, its usage line first and every option of the train command named, exit 0, and no
# run: no step, no train.out_dir (runs/default) made.
"$cleave" train --help > help.log 2>&1
help_status=$?
expect train-help help.log <<'EOF'
usage: cleave train [CONFIG.json] [--set key.path=value ...] [--init-from DIR] [--resume auto|PATH]
EOF
if [ "$help_status" -ne 0 ]; then echo "FAIL train-help: exit $help_status"; failures=$((failures + 1)); fi
for option in --set --resume --init-from --profile --restart-record --allow-config-change --help; do
  grep -q -- "^  $option " help.log || { echo "FAIL train-help: $option not in the help"; failures=$((failures + 1)); }
done
never train-help help.log '^step '
if [ -e runs ]; then echo "FAIL train-help: runs/ was written"; failures=$((failures + 1)); fi

# Training: 3 steps with a checkpoint at step 2 and at the end, MFU against a profile's f32 peak: the H100 profile's
# numbers as a cpu machine (train refuses a profile of another device than the run's: cli_bad_input.sh).
python3 -c "
import json, sys
p = json.load(open(sys.argv[1]))
p.update(device_type='cpu', name='Test CPU with the H100 peaks')
json.dump(p, open(sys.argv[2], 'w'), indent=1)" "$src/profiles/h100_sxm.json" cpu.json || { echo "FAIL cpu.json"; exit 1; }
"$cleave" train "${tiny[@]}" --set train.steps=3 --set checkpoint.interval=2 --set train.out_dir=run \
  --profile cpu.json > train.log 2>&1 || { cat train.log; echo "FAIL train"; exit 1; }
grep -v '^comm backend' train.log > train.lines
expect train-first-lines train.lines <<'EOF'
cleave: tp=N dp=N pp=N (world N) | single stage | model gpt (N blocks in N stage: blocks per stage [N]) | batch N = micro N x accum N x dp N | data synthetic tokens: train split, Markov chain over N tokens with N successors each (loss floor N nats, ln V = N), seq_len N
throughput: N model FLOPs per step (cost model, recomputation not counted; docs/report.md) shared by N rank; MFU against the fN peak N FLOP/s of Test CPU with the HN peaks (cpu.json)
EOF
grep -E '^step ' train.log > steps.lines
expect train-step-line steps.lines <<'EOF'
step N/N | loss N | lr N | gnorm N | N tok/s | N FLOP/s/rank | MFU N% | N ms/step | peak N KiB
EOF
grep -E '^done: ' train.log > done.lines
expect train-summary done.lines <<'EOF'
done: N steps in N s | loss N -> N (min N) | N tok/s | N FLOP/s/rank (MFU N%) | peak N KiB | non-finite N (skipped N) | run
EOF
never train-plural train.log 'in 1 stages'

# Resumed at step 3 (the final checkpoint) for one more step: resumed_at_step is an integer on its row.
"$cleave" train "${tiny[@]}" --set train.steps=4 --set checkpoint.interval=2 --set train.out_dir=run \
  --resume auto > resume.log 2>&1 || { cat resume.log; echo "FAIL resume"; exit 1; }
if grep -q '"resumed_at_step":3,' run/metrics.jsonl && ! grep -q '"resumed_at_step":3\.' run/metrics.jsonl; then
  echo "ok   resumed_at_step is an integer: $(grep -o '"resumed_at_step":[^,]*' run/metrics.jsonl)"
else
  echo "FAIL resumed_at_step:"; sed 's/^/    /' run/metrics.jsonl; failures=$((failures + 1))
fi
grep -q '^checkpoint: resumed from run/checkpoints/step_0000003' resume.log \
  || { echo "FAIL resume says:"; sed 's/^/    /' resume.log; failures=$((failures + 1)); }

# generate and export load a checkpoint: no resume, no optimizer.
"$cleave" generate run/checkpoints --prompt ab --tokens 4 > generate.log 2>&1 || { cat generate.log; echo "FAIL generate"; exit 1; }
expect generate-first-lines generate.log <<'EOF'
checkpoint: loaded run/checkpoints/step_N (step N; rank N read N KiB in N ms, N MB/s)
EOF
"$cleave" export run/checkpoints --out w.safetensors > export.log 2>&1 || { cat export.log; echo "FAIL export"; exit 1; }
expect export-first-lines export.log <<'EOF'
export: N parameters (N elements) of run/checkpoints/step_N -> w.safetensors (N KiB)
EOF
for log in generate.log export.log; do
  never "$log" "$log" 'resumed from|starts fresh|optimizer'
done

# A Hugging Face directory: generate points to import; the imported checkpoint generates without "fresh".
python3 "$src/tests/e2e/hf_fixture.py" hf || { echo "FAIL fixture"; exit 1; }
"$cleave" generate hf --prompt ab --tokens 2 > gen_hf.log 2>&1
status=$?
refuse generate-hf-dir $status gen_hf.log nothing
expect generate-hf-dir gen_hf.log <<'EOF'
error: generate: hf is a Hugging Face model directory, not a Cleave checkpoint; convert it first with cleave import hf --out CKPT, then cleave generate CKPT
EOF
"$cleave" import hf --out ck > import.log 2>&1 || { cat import.log; echo "FAIL import"; exit 1; }
"$cleave" generate ck --prompt ab --tokens 2 > gen_ck.log 2>&1 || { cat gen_ck.log; echo "FAIL generate ck"; exit 1; }
expect generate-imported gen_ck.log <<'EOF'
checkpoint: loaded ck/step_N (weights only, N tensors on rank N)
EOF
never generate-imported gen_ck.log 'resumed from|starts fresh'

# Checks before work.
printf 'a file' > afile
"$cleave" train "${tiny[@]}" --set train.steps=2 --set train.out_dir=r1 --set checkpoint.dir=afile > ckfile.log 2>&1
refuse checkpoint-dir-file $? ckfile.log r1
grep -v '^comm backend' ckfile.log > ckfile.lines
expect checkpoint-dir-file ckfile.lines <<'EOF'
error: checkpoint.dir afile exists and is not a directory; nothing was written (choose another path or remove it)
EOF
"$cleave" train "${tiny[@]}" --set train.steps=2 --set train.out_dir=afile/run > outfile.log 2>&1
refuse out-dir-under-file $? outfile.log afile/run
grep -v '^comm backend' outfile.log > outfile.lines
expect out-dir-under-file outfile.lines <<'EOF'
error: train.out_dir afile/run: afile is a file, not a directory, so nothing can be created under it; choose another path
EOF
"$cleave" generate run/checkpoints --prompt ab --logits afile/l.json > logits.log 2>&1
refuse logits-under-file $? logits.log afile/l.json
expect logits-under-file logits.log <<'EOF'
error: generate: --logits afile/l.json: afile is a file, not a directory, so nothing can be created under it; choose another path
EOF
# A token count past generate's limit is refused before the checkpoint loads, naming the limit.
"$cleave" generate run/checkpoints --prompt ab --tokens 2000000000 > tokens.log 2>&1
refuse generate-tokens-limit $? tokens.log nothing
expect generate-tokens-limit tokens.log <<'EOF'
error: generate: --tokens expects a whole number >= N and <= N, got 'N'
EOF
# ... and a path whose directories do not exist yet passes that check, so the command creates them.
"$cleave" generate run/checkpoints --prompt ab --tokens 2 --logits new/dir/l.json > logits_new.log 2>&1 && [ -s new/dir/l.json ] \
  || { cat logits_new.log; echo "FAIL generate --logits into a new directory"; exit 1; }
"$cleave" export run/checkpoints --out afile/w.safetensors > exportfile.log 2>&1
refuse export-out-under-file $? exportfile.log afile/w.safetensors
expect export-out-under-file exportfile.log <<'EOF'
error: export: --out afile/w.safetensors: afile is a file, not a directory, so nothing can be created under it; choose another path
EOF
"$cleave" import hf --out afile/ck > importfile.log 2>&1
refuse import-out-under-file $? importfile.log afile/ck
expect import-out-under-file importfile.log <<'EOF'
error: import: --out afile/ck: afile is a file, not a directory, so nothing can be created under it; choose another path
EOF

# --init-from with a checkpoint.dir that is a file: refused before the weights are read.
"$cleave" train --init-from hf --set train.steps=1 --set train.out_dir=r3 --set checkpoint.dir=afile > initck.log 2>&1
refuse init-from-checkpoint-dir-file $? initck.log r3
grep -v '^comm backend' initck.log > initck.lines
expect init-from-checkpoint-dir-file initck.lines <<'EOF'
error: checkpoint.dir afile exists and is not a directory; nothing was written (choose another path or remove it)
EOF

# NaN weights: refused at import and at --init-from, naming the tensor, before anything is written or trained.
python3 "$src/tests/e2e/hf_fixture.py" hf_nan --nan transformer.h.1.mlp.c_fc.weight || { echo "FAIL fixture"; exit 1; }
"$cleave" import hf_nan --out nan_ck > import_nan.log 2>&1
refuse import-nan $? import_nan.log nan_ck
expect import-nan import_nan.log <<'EOF'
error: import: hf_nan: tensor blocks.N.mlp.fc.weight holds N non-finite value of N (first: element N is nan); nothing was loaded. The file is damaged or was saved from a diverged model: convert or download it again
EOF
"$cleave" train --init-from hf_nan --set train.steps=1 --set train.out_dir=nan_run > init_nan.log 2>&1
refuse init-from-nan $? init_nan.log nan_run
grep -v '^comm backend' init_nan.log > init_nan.lines
expect init-from-nan init_nan.lines <<'EOF'
error: Hugging Face GPTNLMHeadModel in hf_nan: tensor blocks.N.mlp.fc.weight holds N non-finite value of N (first: element N is nan); nothing was loaded. The file is damaged or was saved from a diverged model: convert or download it again
EOF

if [ "$failures" -gt 0 ]; then
  echo "$failures check(s) failed"
  exit 1
fi
echo "all first-line checks passed"
