#!/usr/bin/env bash
# Runs a fault-test job and checks that it ended on its own: non-zero exit, within <max_seconds>, with a
# line matching <regex> in its output, and no rank process left behind. A job that overruns is killed here
# (after max_seconds + 20), so ctest never hangs on it.
#
# usage: run_fault_test.sh <max_seconds> <regex> <command...>
set -u
max_s=$1
regex=$2
shift 2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export CLEAVE_FAULT_PIDDIR=$work
start_ms=$(( $(date +%s%N) / 1000000 ))
timeout -s KILL $((max_s + 20)) "$@" >"$work/out" 2>&1
rc=$?
elapsed_ms=$(( $(date +%s%N) / 1000000 - start_ms ))
elapsed=$(printf '%d.%03d' $((elapsed_ms / 1000)) $((elapsed_ms % 1000)))
cat "$work/out"
echo "---- fault test: exit code $rc after ${elapsed}s (limit ${max_s}s)"
status=0
if [ "$rc" -eq 0 ]; then echo "FAIL: the job exited 0"; status=1; fi
if [ "$elapsed_ms" -ge $(((max_s + 20) * 1000)) ]; then echo "FAIL: the job did not end by itself (killed here)"; status=1; fi
if [ "$elapsed_ms" -gt $((max_s * 1000)) ]; then echo "FAIL: took ${elapsed}s, limit ${max_s}s"; status=1; fi
if ! grep -Eq "$regex" "$work/out"; then echo "FAIL: no line matches /$regex/"; status=1; fi
sleep 1
for f in "$work"/rank*.pid; do
  [ -e "$f" ] || continue
  pid=$(cat "$f")
  state=$(awk '/^State/{print $2}' "/proc/$pid/status" 2>/dev/null)
  if [ -n "$state" ] && [ "$state" != "Z" ]; then
    echo "FAIL: $(basename "$f" .pid) (pid $pid) outlived the job; killing it"
    kill -KILL "$pid" 2>/dev/null
    status=1
  fi
done
[ $status -eq 0 ] && echo "PASS"
exit $status
