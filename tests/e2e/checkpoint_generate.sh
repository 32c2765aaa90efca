#!/usr/bin/env bash
# `cleave generate` from a checkpoint: a small byte-level GPT trained for 40 steps on the fortunes file and
# saved under pp2 (2 ranks) is sampled on one rank; the same seed gives the same text, the text starts with
# the prompt and holds at most N more bytes, greedy decoding repeats itself, and a checkpoint whose model is
# not byte-level (vocab 64) is refused with a message naming it; one with more tokens than bytes (vocab 300)
# prints token ids with a warning saying why.
# Usage: checkpoint_generate.sh CLEAVE SOURCE_DIR MPIEXEC [FLAGS...]
src=$(realpath "$2")
source "$(dirname "$0")/mpi_script_setup.sh" "$(realpath "$1")" "${@:3}"  # cleave, mpiexec, $work entered
text=/usr/share/games/fortunes/cookie
[ -f "$text" ] || { echo "skip: $text not installed (apt-get install fortunes-min)"; exit 0; }
fail() { echo "FAIL $*"; exit 1; }
"${mpiexec[@]}" -n 2 "$cleave" train "$src/examples/gpt_fortunes.json" --set model.d_model=32 --set model.n_layers=2 \
  --set train.steps=40 --set train.eval_batches=0 --set parallel.pipeline_model_parallel_size=2 \
  --set train.out_dir=run > train.log 2>&1 || { cat train.log; fail "training"; }
gen() { "$cleave" generate run/checkpoints --prompt "Love is " "$@" 2> gen.log; }
a=$(gen --tokens 50 --seed 5) || { cat gen.log; fail "generate"; }
b=$(gen --tokens 50 --seed 5) || fail "generate again"
[ "$a" = "$b" ] || fail "the same seed gave different text: '$a' vs '$b'"
[ "${a:0:8}" = "Love is " ] || fail "the output does not start with the prompt: '$a'"
[ "$(printf '%s' "$a" | wc -c)" -le 58 ] || fail "more than 50 bytes were generated: '$a'"
g1=$(gen --tokens 30 --temperature 0) && g2=$(gen --tokens 30 --temperature 0) && [ "$g1" = "$g2" ] || fail "greedy"
k=$(gen --tokens 30 --top-k 1 --seed 9) || fail "top-k 1"
[ "$k" = "$g1" ] || fail "top-k 1 differs from greedy: '$k' vs '$g1'"
echo "ok   generate: '$a'"

"$cleave" train --set train.steps=2 --set model.vocab_size=64 --set train.out_dir=small > small.log 2>&1 || { cat small.log; fail "small run"; }
"$cleave" generate small/checkpoints --prompt "x" > refuse.log 2>&1 && fail "a vocab-64 model was sampled"
grep -q "vocab_size 64; generation needs a language model (gpt, llama or moe) with vocab_size >= 256" refuse.log || { cat refuse.log; fail "refusal message"; }
echo "ok   generate refuses a non byte-level model: $(grep -o 'generate: .*' refuse.log)"

# A vocabulary larger than bytes: token ids, not '?' per token, and a warning saying why.
"$cleave" train --set train.steps=2 --set model.vocab_size=300 --set train.out_dir=wide > wide.log 2>&1 || { cat wide.log; fail "vocab-300 run"; }
ids=$("$cleave" generate wide/checkpoints --prompt "ab" --tokens 20 --seed 3 2> wide_gen.log) || { cat wide_gen.log; fail "vocab-300 generate"; }
grep -q "model.vocab_size is 300, not 256: the checkpoint's tokens are not bytes" wide_gen.log || { cat wide_gen.log; fail "no warning for a non-byte vocabulary"; }
python3 -c "
import sys
ids = [int(t) for t in sys.argv[1].split()]
assert len(ids) == 22 and ids[:2] == [97, 98] and all(0 <= i < 300 for i in ids), ids
" "$ids" || fail "vocab-300 output is not the 22 token ids: '$ids'"
echo "ok   generate prints token ids for a vocab-300 model: $ids"
