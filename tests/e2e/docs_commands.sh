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
#    seconds each): 60 covers the checkpoint of step 50 that docs/checkpoints.md resumes; a line that sets
#    train.steps itself keeps its own;
#  - `cleave profile` lines get `--repeats 1 --rounds 1` (the measurement is the same code, fewer repetitions);
#  - ranks past the cores are allowed (OMPI_MCA_rmaps_base_oversubscribe=1, as `cleave run` and `plan --trial` start
#    mpiexec themselves), and as root so is Open MPI's root run (OMPI_ALLOW_RUN_AS_ROOT, as the test's own flags do).
#  - a block naming models/TinyLlama (docs/models.md's fine-tuning recipe) runs on a tiny Llama with a Llama 2-style
#    tokenizer.json that hf_fixture.py writes there (max_position_embeddings 2048, as TinyLlama's), corpus/*.txt
#    cut from the fortunes file and a finetune.json with no model section (`{}`), as the page says it may be.
# Lines naming what this machine has not (CONFIG.json, a hostfile, srun, salloc) are skipped and listed.
# First, every option a page shows on a `cleave COMMAND` line or code span must be one `cleave COMMAND --help` lists
# (`simulate --config`, `profile --gemm` and the train options after `cleave run ... --` have their own help), and
# every config key a page names must be a row of docs/config.md.
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

# The options the pages show, each against its command's --help: "HELP WORDS|--flag|page" lines.
commands=" $("$cleave" --help | awk '/^commands:/ { on = 1; next } on && /^  [a-z]/ { printf "%s ", $1 }') "
[[ "$commands" == *" train "*" verify "* ]] || fail "cleave --help lists no commands: '$commands'"
flags_of() {  # HELP WORDS, then the text after them
  local help=$1 rest=$2 flag
  for flag in $(grep -oE '(^| )--[a-z][a-z0-9-]*' <<<"$rest"); do echo "$help|$flag|$page_name"; done
}
for page in "$src"/README.md "$src"/docs/*.md "$src"/examples/*/README.md "$src"/profiles/README.md; do
  page_name=$(basename "$(dirname "$page")")/$(basename "$page")
  { grep -oE '`cleave [a-z]+[^`]*`' "$page" | tr -d '`'
    awk '/^```/ { in_block = !in_block; next }
         in_block || /^    / {
           line = (pending == "" ? $0 : pending " " $0)
           if (line ~ /\\[[:space:]]*$/) { sub(/\\[[:space:]]*$/, "", line); pending = line; next }
           pending = ""; print line
         }' "$page" | grep -oE 'cleave [a-z]+ .*'
  } | while read -r _ command rest; do
    [[ "$commands" == *" $command "* ]] || continue  # output such as "cleave plan: ..."
    rest=" ${rest%%#*} "  # a trailing comment is prose
    if [[ "$command" == run && "$rest" == *" -- "* ]]; then
      flags_of run "${rest%% -- *}"; flags_of train "${rest#* -- }"
    elif [[ "$command" == simulate && "$rest" == *" --config "* ]]; then flags_of "simulate --config x" "$rest"
    elif [[ "$command" == profile && "$rest" == *" --gemm "* ]]; then flags_of "profile --gemm" "$rest"
    else flags_of "$command" "$rest"
    fi
  done
done | sort -u > "$work/flags.txt"
[ "$(wc -l < "$work/flags.txt")" -ge 40 ] || fail "only $(wc -l < "$work/flags.txt") options found on the pages"
while IFS='|' read -r help flag page_name; do
  help_file="$work/help_${help// /_}.txt"
  if [ ! -f "$help_file" ]; then read -ra words <<<"$help"; "$cleave" "${words[@]}" --help > "$help_file" 2>&1; fi
  grep -qE -- "(^|[^a-z-])$flag([^a-z-]|\$)" "$help_file" ||
    fail "$page_name shows 'cleave $help ... $flag', which 'cleave $help --help' does not list"
done < "$work/flags.txt"
echo "ok   $(wc -l < "$work/flags.txt") options the pages show are in their commands' --help"

# The config keys the pages name (a code span `section.key`, or `--set section.key=`) are keys of docs/config.md's
# tables (which unit_docs checks against the config code). Names that only look like keys: files (.cpp, .hpp,
# .py, .safetensors), Hugging Face tensor names (model.embed_tokens, model.norm), a C++ member (model.llama) and
# checkpoints.md's example of a misspelt key (optimizer.lrr).
sections='(model|parallel|batch|optimizer|train|checkpoint|data|device)'
grep -oE '^\| `[a-z0-9_.]+`' "$src/docs/config.md" | sed 's/^| `//; s/`$//' | sort -u > "$work/keys.txt"
[ "$(wc -l < "$work/keys.txt")" -ge 90 ] || fail "only $(wc -l < "$work/keys.txt") keys in docs/config.md's tables"
{ grep -ohE "\`$sections\.[a-z0-9_]+(\.[a-z0-9_]+)?\`" "$src"/README.md "$src"/docs/*.md "$src"/examples/*/README.md \
    "$src"/profiles/README.md | tr -d '`'
  grep -ohE -- "--set $sections\.[a-z0-9_.]+=" "$src"/README.md "$src"/docs/*.md "$src"/examples/*/README.md \
    "$src"/profiles/README.md | sed 's/^--set //; s/=$//'
} | grep -vE '\.(cpp|hpp|py|safetensors)$' | grep -vxE 'model\.(embed_tokens|norm|llama)|optimizer\.lrr' | sort -u \
  > "$work/named_keys.txt"
[ "$(wc -l < "$work/named_keys.txt")" -ge 60 ] || fail "only $(wc -l < "$work/named_keys.txt") config keys named on the pages"
unknown=$(comm -23 "$work/named_keys.txt" "$work/keys.txt" | tr '\n' ' ')
[ -z "$unknown" ] || fail "the pages name config keys docs/config.md has no row for: $unknown"
echo "ok   $(wc -l < "$work/named_keys.txt") config keys the pages name are rows of docs/config.md"

# docs/models.md's recipe: a model directory, a corpus and a finetune.json where the block runs.
finetune_fixture() {
  python3 "$src/tests/e2e/hf_fixture.py" --llama --max-positions 2048 --tokenizer "$1/models/TinyLlama" > /dev/null ||
    fail "hf_fixture.py"
  mkdir -p "$1/corpus" && split -n l/3 -d --additional-suffix=.txt "$data" "$1/corpus/part" || fail "the corpus"
  echo '{}' > "$1/finetune.json"
}

count=$(wc -l < "$work/commands.tsv")
[ "$count" -ge 15 ] || fail "only $count commands found in docs/*.md's sh blocks"

n=0 ran=0 skipped=0 previous=""
while IFS=$'\t' read -r block expected line; do
  n=$((n + 1))
  if [[ "$line" =~ (CONFIG\.json|hosts\.txt|^srun|^salloc) ]]; then
    echo "[$n/$count] $block: skip (needs ${BASH_REMATCH[1]}): $line"; skipped=$((skipped + 1)); continue
  fi
  if [ "$block" != "$previous" ]; then  # a fresh directory per block
    dir="$work/$(tr '#/.' '___' <<<"$block")"
    mkdir -p "$dir" && ln -s "$src/examples" "$dir/examples" && ln -s "$src/profiles" "$dir/profiles"
    awk -F'\t' -v b="$block" '$1 == b' "$work/commands.tsv" | grep -q 'models/TinyLlama' && finetune_fixture "$dir"
    previous=$block
  fi
  run=$line
  if [[ "$line" =~ cleave\ (train|run)\  ]]; then
    steps=60; [[ "$line" == *examples/oversized/* ]] && steps=3
    [[ "$line" == *train.steps=* ]] || run="$run --set train.steps=$steps"
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
