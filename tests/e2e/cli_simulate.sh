#!/usr/bin/env bash
# `cleave simulate` end to end: the JSON summary reproduces the 1F1B bubble (p-1)/(m+p-1) = 3/11 for p=4,
# m=8 with per-rank peaks p-r; --svg and --trace write files of the right kind; --save round-trips through
# --schedule FILE; bad input exits 1 with a one-line error; simulate --config --auto-schedule-priced searches
# schedule auto only. Usage: cli_simulate.sh CLEAVE
set -u
cleave=$1
repo=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
fail() { echo "FAIL $*"; exit 1; }

json=$("$cleave" simulate --schedule 1f1b --stages 4 --microbatches 8 --json) || fail "1f1b json exit $?"
grep -q '"bubble_fraction":0.2727272727272727' <<<"$json" || fail "1f1b bubble: $json"
grep -q '"peak_activations":4,"rank":0' <<<"$json" || fail "rank 0 peak: $json"
grep -q '"peak_activations":1,"rank":3' <<<"$json" || fail "rank 3 peak: $json"
echo "ok   1f1b p=4 m=8 bubble 3/11, peaks 4..1"

"$cleave" simulate --schedule zb_v --stages 4 --microbatches 8 --svg zbv.svg --trace zbv.json --save zbv.sched \
    > summary.txt || fail "zb_v exit $?"
grep -q '<svg' zbv.svg && grep -q '</svg>' zbv.svg || fail "svg"
grep -q '"traceEvents"' zbv.json && grep -q '"ph": "X"' zbv.json || fail "chrome trace"
again=$("$cleave" simulate --schedule zbv.sched --json) || fail "reload exit $?"
grep -q '"makespan":51.0' <<<"$again" || fail "reloaded zb_v makespan: $again"
echo "ok   zb_v svg, chrome trace, save/load (makespan 51)"

# auto builds its schedule for the given costs and memory limit: with F, I, W = 1, 1, 0.5 and 2p - 1 stashes the
# last rank never idles once started, so the makespan is the lower bound (p - 1)·F + m·(F + I + W) = 3 + 20.
auto=$("$cleave" simulate --schedule auto --stages 4 --microbatches 8 --costs 1,1,0.5 --max-stashes 7 --json) ||
  fail "auto exit $?"
grep -q '"makespan":23.0' <<<"$auto" && grep -q '"schedule":"auto"' <<<"$auto" || fail "auto: $auto"
# --memory-limit is bytes here too (as in plan and simulate --config): 7 stashes of 3 MiB fit 21.5MiB.
bytes=$("$cleave" simulate --schedule auto --stages 4 --microbatches 8 --costs 1,1,0.5 --memory-limit 21.5MiB \
        --stash-bytes 3MiB --json) || fail "auto with a byte limit: exit $?"
[ "$bytes" = "$auto" ] || fail "auto at 21.5MiB / 3MiB differs from --max-stashes 7: $bytes"
echo "ok   auto at memory 7 (makespan 23; --max-stashes 7 = --memory-limit 21.5MiB --stash-bytes 3MiB)"

printf 'rank 0: 0F0 0B0\nrank 1: 1B0 1F0\n' > broken.sched
out=$("$cleave" simulate --schedule broken.sched 2>&1); status=$?
[ $status -ne 0 ] && grep -q '1B0 on rank 1 comes before 1F0' <<<"$out" || fail "broken schedule: $status $out"
out=$("$cleave" simulate --schedule 1f1b --stages 4 2>&1); status=$?
[ $status -ne 0 ] && grep -q -- '--microbatches' <<<"$out" || fail "missing flag: $status $out"
out=$("$cleave" simulate --schedule 1f1b --stages 4 --microbatches 8 --frobnicate 2>&1); status=$?
[ $status -ne 0 ] && grep -q 'frobnicate' <<<"$out" || fail "unknown flag: $status $out"
out=$("$cleave" simulate --schedule zb_h2 --stages 4 --microbatches 8 --max-stashes 7 2>&1); status=$?
[ $status -ne 0 ] && grep -q -- '--max-stashes / --memory-limit apply only to --schedule auto' <<<"$out" || fail "memory limit: $out"
# The old stash count given to --memory-limit is read as bytes and refused, pointing at --max-stashes.
out=$("$cleave" simulate --schedule auto --stages 4 --microbatches 8 --memory-limit 7 2>&1); status=$?
[ $status -ne 0 ] && grep -q -- '--memory-limit 7 B is bytes per rank .*--max-stashes N' <<<"$out" || fail "memory limit as a count: $out"
out=$("$cleave" simulate --schedule dualpipev --stages 4 --microbatches 6 2>&1); status=$?
# Named by simulate's own options (not the config's batch.gradient_accumulation_steps), exit 64 (bad input).
[ $status -eq 64 ] && grep -q 'dualpipev needs at least 8 micro-batches per step on --stages 4, got --microbatches 6; use --microbatches 8' <<<"$out" &&
  ! grep -q 'batch\.' <<<"$out" || fail "dualpipev too few: $status $out"
# Output files are new: an existing one (a config, say, given by a typo) is refused before any work and left as
# it was; one in a directory that does not exist yet is written there.
echo '{"keep": 1}' > keep.json
for flag in --svg --trace --save; do
  out=$("$cleave" simulate --schedule 1f1b --stages 4 --microbatches 8 $flag keep.json 2>&1); status=$?
  [ $status -ne 0 ] && grep -q -- "simulate: $flag keep.json already exists; nothing was written" <<<"$out" &&
    [ "$(cat keep.json)" = '{"keep": 1}' ] || fail "$flag over an existing file: $status $out"
done
out=$("$cleave" simulate --config /dev/null --world 1 --svg keep.json 2>&1); status=$?
[ $status -ne 0 ] && grep -q -- "--svg keep.json already exists" <<<"$out" || fail "simulate --config --svg over a file: $out"
"$cleave" simulate --schedule zb_v --stages 4 --microbatches 8 --svg new/a.svg --trace new/a.json --save new/a.sched \
  > /dev/null 2>&1 && [ -s new/a.svg ] && [ -s new/a.json ] && [ -s new/a.sched ] || fail "outputs into a new directory"
# Sizes that would run for hours are refused at once with the bound.
out=$("$cleave" simulate --schedule zb_v --stages 100000 --microbatches 8 2>&1); status=$?
[ $status -ne 0 ] && grep -q -- "--stages expects a whole number >= 1 and <= 1024, got '100000'" <<<"$out" ||
  fail "huge --stages: $status $out"
out=$("$cleave" simulate --schedule 1f1b --stages 4 --microbatches 100000000 2>&1); status=$?
[ $status -ne 0 ] && grep -q -- "--microbatches expects a whole number >= 1 and <= 65536" <<<"$out" ||
  fail "huge --microbatches: $status $out"
# Each within its bound but both at once: the dry run would take hours (1024 x 65536) and was started anyway.
out=$(timeout 20 "$cleave" simulate --schedule 1f1b --stages 1024 --microbatches 65536 2>&1); status=$?
[ $status -eq 64 ] && grep -q -- "simulate: --stages 1024 x 1 virtual x --microbatches 65536 = 67108864 stage micro-batches is past 1048576.*Give at most 1024 micro-batches on 1024 stages" <<<"$out" ||
  fail "huge --stages x --microbatches: $status $out"
out=$(timeout 20 "$cleave" simulate --schedule zb_v --stages 1024 --microbatches 1024 2>&1); status=$?
[ $status -eq 64 ] && grep -q -- "--stages 1024 x 2 virtual x --microbatches 1024 = 2097152 stage micro-batches" <<<"$out" ||
  fail "huge --stages x --virtual x --microbatches: $status $out"
echo "ok   bad input rejected with one-line errors"

# --auto-schedule-priced: schedule auto searched on the estimate's prices (echoed in --json); refused, naming the
# option and the schedule, for a config whose schedule is not auto.
priced=(simulate --config "$repo/examples/gpt_fortunes.json" --world 2 --profile "$repo/profiles/h100_sxm.json"
        --set parallel.pipeline_model_parallel_size=2 --auto-schedule-priced)
out=$("$cleave" "${priced[@]}" --set parallel.schedule=auto --json) || fail "priced auto exit $?: $out"
grep -q '"auto_schedule_priced": true' <<<"$out" || fail "priced auto json: $out"
out=$("$cleave" "${priced[@]}" 2>&1); status=$?
[ $status -ne 0 ] && grep -q -- '--auto-schedule-priced searches schedule auto.*parallel.schedule "1f1b"' <<<"$out" ||
  fail "priced 1f1b: $status $out"
echo "ok   --auto-schedule-priced on auto, refused on 1f1b"
