#!/usr/bin/env bash
# README's commands, run as written: every line of README.md's ```sh blocks that starts with `cleave` or
# `mpirun` (with its `\` continuation lines) runs in order in a scratch directory holding links to examples/
# and profiles/, with `cleave` the built binary and `mpirun` the test's mpiexec and flags. Each must exit 0,
# and the block must use every main command, so a README whose examples drift from the CLI fails here.
# Lines that need machines this test has not (hostfiles, srun, kubectl) live in README's ```text blocks.
# One change, as docs_commands.sh makes it: `cleave profile` lines get `--repeats 1 --rounds 1` (the measurement is
# the same code, fewer repetitions; as written it took 67 of the test's 120 s on the 2 vCPU Xeon, 2026-12-02).
# Usage: readme_commands.sh CLEAVE SOURCE_DIR MPIEXEC [FLAGS...]
source "$(dirname "${BASH_SOURCE[0]}")/commands_setup.sh"
mkdir -p "$work/run"
ln -s "$src/examples" "$work/run/examples"
ln -s "$src/profiles" "$work/run/profiles"

# The commands: joined continuation lines of ```sh blocks, those starting with cleave or mpirun.
awk '
  /^```/ { in_sh = ($0 ~ /^```sh[[:space:]]*$/) && !in_block; in_block = !in_block; next }
  in_sh {
    line = (pending == "" ? $0 : pending " " $0)
    if (line ~ /\\[[:space:]]*$/) { sub(/\\[[:space:]]*$/, "", line); pending = line; next }
    pending = ""
    if (line ~ /^(cleave|mpirun)[[:space:]]/) print line
  }' "$src/README.md" > "$work/commands.txt"

count=$(wc -l < "$work/commands.txt")
[ "$count" -ge 10 ] || fail "only $count commands found in README.md's sh blocks"
for command in train plan simulate bench profile verify report export import generate; do
  grep -Eq "cleave $command( |$)" "$work/commands.txt" || fail "README's sh blocks show no 'cleave $command'"
done

mpirun() { "${mpiexec[@]}" "$@"; }
export PATH="$work/bin:$PATH" OMP_WAIT_POLICY=passive
cd "$work/run"
n=0
while IFS= read -r line; do
  n=$((n + 1))
  echo "[$n/$count] $line"
  start=$(date +%s)
  run=$line
  [[ "$line" =~ cleave\ profile\  ]] && run="$run --repeats 1 --rounds 1"
  eval "$run" > "out_$n.log" 2>&1 < /dev/null || { tail -20 "out_$n.log"; fail "README command $n exited non-zero: $line"; }
  echo "      ok ($(( $(date +%s) - start )) s)"
done < "$work/commands.txt"

# What the commands say they write.
for f in runs/f1/config.json runs/f1/metrics.jsonl runs/f1/run.json runs/f1/report.html runs/pp2/report.html \
         f1.safetensors f1-hf/config.json f1-hf/model.safetensors f1-imported/step_0000000/index.json \
         runs/hf-tp2/metrics.jsonl zbv.svg zbv.json here.json best.json runs/best/metrics.jsonl bench-pp2/bench.json \
         bench-pp2/bench.html runs/llama/metrics.jsonl; do
  [ -s "$f" ] || fail "README's commands did not write $f"
done
echo "PASS: $count README commands ran"
