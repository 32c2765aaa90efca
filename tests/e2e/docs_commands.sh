#!/usr/bin/env bash
# The commands of docs/*.md, run: every line of a ```sh block that starts with `cleave`, `mpirun` or `mpiexec`
# (with its `\` continuation lines) runs, block by block in a fresh scratch directory holding links to examples/
# and profiles/, in order within the block (a block is one sequence: profile, then plan from its file), with
# `mpirun`/`mpiexec` the test's launcher and flags. Each must exit 0, except a command whose next line is a
# comment `# error: WHAT: ...`: that one must fail and print `error: WHAT:`. README.md's block has its own test
# (readme_commands.sh); this one keeps the pages' examples from drifting away from the CLI and the configs.
#
# What the test changes, so the suite stays short (each change listed here, nothing else):
#  - `cleave train` and `cleave run` lines get `--set train.steps=60` (3 for examples/oversized, whose steps take
#    seconds each): 60 covers the checkpoint of step 50 that docs/checkpoints.md resumes;
#  - `cleave profile` lines get `--repeats 1 --rounds 1` (the measurement is the same code, fewer repetitions);
#  - ranks past the cores are allowed (OMPI_MCA_rmaps_base_oversubscribe=1, as `cleave run` and `plan --trial` start
#    mpiexec themselves), and as root so is Open MPI's root run (OMPI_ALLOW_RUN_AS_ROOT, as the test's own flags do).
# Lines naming what this machine has not (CONFIG.json, a hostfile, models/, finetune.json, srun, salloc) are
# skipped and listed; docs/models.md's fine-tuning recipe runs in finetune_recipe.sh on a model it writes.
# Usage: docs_commands.sh CLEAVE SOURCE_DIR MPIEXEC [FLAGS...]
source "$(dirname "${BASH_SOURCE[0]}")/commands_setup.sh"
mpirun() { "${mpiexec[@]}" "$@"; }
mpiexec() { "${mpiexec[@]}" "$@"; }
export PATH="$work/bin:$PATH" OMP_WAIT_POLICY=passive OMPI_MCA_rmaps_base_oversubscribe=1
[ "$(id -u)" -eq 0 ] && export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

# Each sh block's commands as "BLOCK<TAB>EXPECTED_ERROR<TAB>COMMAND" (EXPECTED_ERROR "-" when it must succeed).
for page in "$src"/docs/*.md; do
  awk -v page="$(basename "$page")" '
    /^```/ { if (!in_block) { block++; in_sh = ($0 ~ /^```sh[[:space:]]*$/) } else in_sh = 0; in_block = !in_block; next }
    in_sh {
      line = (pending == "" ? $0 : pending " " $0)
      if (line ~ /\\[[:space:]]*$/) { sub(/\\[[:space:]]*$/, "", line); pending = line; next }
      pending = ""
      if (line ~ /^#[[:space:]]*error:/ && last != "") {
        sub(/^#[[:space:]]*error:[[:space:]]*/, "", line); sub(/:.*/, ":", line); expected[last] = line; next
      }
      if (line ~ /^(cleave|mpirun|mpiexec)[[:space:]]/) {
        sub(/[[:space:]]+#.*$/, "", line)  # a trailing comment
        n++; cmd[n] = line; where[n] = page "#" block; expected[n] = "-"; last = n
      } else if (line !~ /^[[:space:]]*#/) last = ""
    }
    END { for (i = 1; i <= n; i++) printf "%s\t%s\t%s\n", where[i], expected[i], cmd[i] }' "$page"
done > "$work/commands.tsv"

count=$(wc -l < "$work/commands.tsv")
[ "$count" -ge 15 ] || fail "only $count commands found in docs/*.md's sh blocks"

n=0 ran=0 skipped=0 previous=""
while IFS=$'\t' read -r block expected line; do
  n=$((n + 1))
  if [[ "$line" =~ (CONFIG\.json|hosts\.txt|models/|finetune\.json|^srun|^salloc) ]]; then
    echo "[$n/$count] $block: skip (needs ${BASH_REMATCH[1]}): $line"; skipped=$((skipped + 1)); continue
  fi
  if [ "$block" != "$previous" ]; then  # a fresh directory per block
    dir="$work/$(tr '#/.' '___' <<<"$block")"
    mkdir -p "$dir" && ln -s "$src/examples" "$dir/examples" && ln -s "$src/profiles" "$dir/profiles"
    previous=$block
  fi
  run=$line
  if [[ "$line" =~ cleave\ (train|run)\  ]]; then
    steps=60; [[ "$line" == *examples/oversized/* ]] && steps=3
    run="$run --set train.steps=$steps"
  elif [[ "$line" =~ cleave\ profile\  ]]; then
    run="$run --repeats 1 --rounds 1"
  fi
  echo "[$n/$count] $block: $line"
  start=$(date +%s)
  ( cd "$dir" && eval "$run" ) > "$work/out_$n.log" 2>&1 < /dev/null
  status=$?
  if [ "$expected" = "-" ]; then
    [ $status -eq 0 ] || { tail -20 "$work/out_$n.log"; fail "$block: command exited $status: $line"; }
  else
    [ $status -ne 0 ] || { tail -20 "$work/out_$n.log"; fail "$block: expected 'error: $expected', got exit 0: $line"; }
    grep -qF "error: $expected" "$work/out_$n.log" ||
      { tail -20 "$work/out_$n.log"; fail "$block: no 'error: $expected' in the output of: $line"; }
  fi
  ran=$((ran + 1))
  echo "      ok ($(( $(date +%s) - start )) s)"
done < "$work/commands.tsv"
echo "PASS: $ran docs commands ran ($skipped skipped: they need machines or files this test has not)"
