#!/usr/bin/env bash
# The run report through the CLI (docs/report.md):
#  - `cleave train` (gpt_fortunes, pp2 under mpiexec, evaluation every 5 steps, a memory cap) writes
#    report.html and run.json into its run directory;
#  - the page is self-contained (no http, no src=, no script or link element) and has one curve point per
#    step for loss, lr, throughput and step time, one eval_loss point per evaluation, a memory bar per rank
#    with the cap, the layout and the resolved config;
#  - `cleave report RUN_DIR` regenerates it byte for byte;
#  - bad input: no directory, a directory without metrics.jsonl, a corrupt metrics line (error names the file
#    and the line), no argument; train.report false writes no page;
#  - progress: plain lines into a file, a live bar with an ETA on a terminal (script(1) provides a pty).
# Usage: run_report.sh CLEAVE SRC_DIR MPIEXEC [FLAGS...]
set -u
cleave=$1
src=$2
shift 2
mpiexec=("$@")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
fail() { echo "FAIL $*"; exit 1; }
steps=12
common=(--set train.steps=$steps --set train.eval_interval=5 --set train.eval_batches=2 --set train.log_interval=4
        --set model.d_model=64 --set model.n_layers=2 --set device.memory_limit=256MiB)

"${mpiexec[@]}" -n 2 "$cleave" train "$src/examples/gpt_fortunes.json" "${common[@]}" \
  --set parallel.pipeline_model_parallel_size=2 --set train.out_dir=run > train.log 2>&1 \
  || { cat train.log; fail "training run"; }
# Every example evaluates during its run, not only after the last step (the eval curve has several points).
python3 - "$src"/examples/*.json "$src"/examples/*/*.json << 'PY' || fail "an example without a useful train.eval_interval"
import json, sys
for path in sys.argv[1:]:
    train = json.load(open(path))["train"]
    interval, steps = train.get("eval_interval", 0), train["steps"]
    assert 0 < interval and steps // interval >= 4, f"{path}: eval_interval {interval} over {steps} steps"
PY
page=run/report.html
[ -s "$page" ] || { cat train.log; fail "no report.html after cleave train"; }
[ -s run/run.json ] || fail "no run.json"
grep -q "report run/report.html" train.log || fail "the train log does not name the report"

# Self-contained: nothing fetched from anywhere.
grep -Eiq 'https?:|src=|<script|<link|@import|url\(' "$page" && fail "report.html references something external"

points() { grep -o "data-series=\"$1\" data-points=\"[0-9]*\"" "${2:-$page}" | head -n 1 | grep -o '[0-9]*"$' | tr -d '"'; }
# The points attribute really holds that many x,y pairs.
pairs() { grep -o "data-series=\"$1\"[^>]* points=\"[^\"]*\"" "$page" | head -n 1 | sed 's/.* points="//; s/"$//' | wc -w; }
for series in loss lr tokens_per_s step_ms grad_norm peak_bytes; do
  [ "$(points $series)" = "$steps" ] || fail "$series curve has $(points $series) points, expected $steps"
  [ "$(pairs $series)" = "$steps" ] || fail "$series polyline holds $(pairs $series) pairs, expected $steps"
done
evals=$(grep -c '"eval_loss"' run/metrics.jsonl)
[ "$evals" = 3 ] || fail "expected evaluations at steps 5, 10, 12; metrics.jsonl has $evals"
[ "$(points eval_loss)" = "$evals" ] || fail "eval_loss curve has $(points eval_loss) points, expected $evals"
for text in 'rank 0 (pp 0, dp 0, tp 0)' 'rank 1 (pp 1, dp 0, tp 0)' 'cap 256.00 MiB' 'optimizer_state' \
            'activations' 'tp=1 dp=1 pp=2' '&quot;pipeline_model_parallel_size&quot;: 2' 'blocks per stage'; do
  grep -qF "$text" "$page" || fail "report.html lacks '$text'"
done
echo "ok   report: $(wc -c < "$page") bytes, $steps points per curve, $evals eval points, 2 ranks' memory"

# Regenerated from the run directory's files: the same bytes.
cp "$page" first.html
rm "$page"
"$cleave" report run > report.log 2>&1 || { cat report.log; fail "cleave report"; }
cmp -s first.html "$page" || fail "cleave report wrote a different page than cleave train"
echo "ok   cleave report regenerates the same page"

# expect_error NAME REGEX ARGS...: non-zero exit and a message matching REGEX.
expect_error() {
  local name=$1 pattern=$2
  shift 2
  local out status
  out=$("$cleave" report "$@" 2>&1)
  status=$?
  [ $status -ne 0 ] || fail "$name: exit 0"
  grep -Eq -- "$pattern" <<< "$out" || { echo "$out"; fail "$name: message does not match /$pattern/"; }
  echo "ok   $name: $(grep -E -- "$pattern" <<< "$out" | head -n 1)"
}
expect_error no-directory 'report: nope is not a directory' nope
mkdir empty
expect_error no-metrics 'empty/metrics.jsonl not found' empty
cp -r run corrupt
rm corrupt/report.html
head -c 100 run/metrics.jsonl >> corrupt/metrics.jsonl  # a truncated row after the good ones, then another row
printf '\n' >> corrupt/metrics.jsonl && head -n 1 run/metrics.jsonl >> corrupt/metrics.jsonl
expect_error corrupt-metrics "corrupt/metrics.jsonl line $((steps + 1)) does not parse" corrupt
[ -e corrupt/report.html ] && fail "a report was written from a corrupt metrics file"
# An interrupted run's last row, cut short without its newline: left out with a warning (as a resume drops it),
# and the page of the rows before it is written.
cp -r run cut && rm cut/report.html && head -c 100 run/metrics.jsonl >> cut/metrics.jsonl
"$cleave" report cut > cut.log 2>&1 || { cat cut.log; fail "a run whose last row was cut short got no report"; }
grep -q "cut/metrics.jsonl: its last line (100 bytes, no newline) is a row cut short (an interrupted run?); left out" cut.log \
  && [ -s cut/report.html ] || { cat cut.log; fail "the cut-short last row"; }
echo "ok   cut-short-last-row: left out with a warning, report.html written"
expect_error no-argument 'give a run directory' 

# train.report false: no page. Progress into a file: plain lines, no carriage return. The run is zb_v at pp 1: its 2
# chunks on one rank, which run.json and the page made from it name as the log does (they said "single stage").
"$cleave" train "$src/examples/gpt_fortunes.json" "${common[@]}" --set train.steps=6 --set train.report=false \
  --set parallel.schedule=zb_v --set train.out_dir=quiet > quiet.log 2>&1 || { cat quiet.log; fail "train.report=false run"; }
[ -e quiet/report.html ] && fail "train.report false still wrote report.html"
[ -s quiet/run.json ] || fail "train.report false: run.json missing (the report could be made later)"
grep -q $'\r' quiet.log && fail "progress into a file has carriage returns"
grep -q '^.*step 4/6 | loss' quiet.log || fail "no plain progress line in the log file"
echo "ok   train.report false writes no page; a log file gets plain lines"
chunks='zb_v on one rank, running its 2 chunks'
grep -qF "schedule $chunks" quiet.log || { cat quiet.log; fail "the log does not name zb_v's 2 chunks on one rank"; }
grep -qF "\"schedule\": \"$chunks\"" quiet/run.json || { grep schedule quiet/run.json; fail "run.json's schedule at pp 1 under zb_v"; }
"$cleave" report quiet > quiet_report.log 2>&1 || { cat quiet_report.log; fail "cleave report quiet"; }
grep -qF "<th class=\"l\">schedule</th><td>$chunks</td>" quiet/report.html || fail "the page's schedule row at pp 1 under zb_v"
echo "ok   zb_v at pp 1: the log, run.json and the page say '$chunks'"

# A run that fails still gets its page, of the steps it finished (rank 0 throws in step 4: the test hook of
# the failure drills, engine/train/fault_injection.hpp).
CLEAVE_FAULT_INJECT=0:4:forward:throw "$cleave" train "$src/examples/gpt_fortunes.json" "${common[@]}" \
  --set train.out_dir=failed > failed.log 2>&1 && fail "the injected fault did not fail the run"
grep -q 'report failed/report.html (of the steps before the failure)' failed.log || { cat failed.log; fail "no report after a failure"; }
[ "$(points loss failed/report.html)" = 3 ] || fail "the failed run's page has $(points loss failed/report.html) loss points, expected 3"
grep -q 'No run.json' failed/report.html || fail "the failed run's page does not say run.json is missing"
echo "ok   a failed run gets a page of its 3 finished steps"

# On a terminal: the live bar with an ETA, redrawn with carriage returns.
if command -v script > /dev/null; then
  script -qec "'$cleave' train '$src/examples/gpt_fortunes.json' ${common[*]} --set train.steps=6 --set train.out_dir=tty" \
    /dev/null > tty.log 2>&1 < /dev/null || { cat tty.log; fail "run on a pty"; }
  grep -q $'\r\\[#*\\.*\\] *[0-9]*% [0-9]*/6 | loss .* | ETA ' tty.log || { cat -v tty.log; fail "no live bar on a terminal"; }
  echo "ok   a terminal gets the live bar: $(grep -ao '\[#*\.*\] *[0-9]*% [0-9]*/6 | loss [^|]*| [^|]*| ETA [0-9a-z-]*' tty.log | head -n 1)"
fi
echo "ok   run report"
