#!/usr/bin/env bash
# Why a rank waits at its meetings: trains CONFIG at 2 ranks (one per core) with train.trace on and the extra --set
# overrides, sampling every rank thread's /proc schedstat (CPU time, time runnable but not running, switches) every
# 50 ms, then prints the steady state's per-thread figures (the last 60% of the run) and the traced step's spans and
# waits (ms). Used for RESULTS-trial-2026-11-29-b.md. Needs Linux schedstat (/proc/<pid>/task/<tid>/schedstat).
# Usage: benchmarks/planner/sched_waits.sh BUILD_DIR CONFIG OUT_DIR [--set key=value ...]
set -u
build=$1; config=$(realpath "$2"); out=$(realpath -m "$3"); shift 3
root=$(cd "$(dirname "$0")/../.." && pwd)
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_btl_vader_single_copy_mechanism=${SINGLE_COPY:-none}
rm -rf "$out"
mpiexec -n 2 "$root/$build/bin/cleave" train "$config" --set train.trace=true --set train.eval_interval=0 \
  --set train.eval_batches=0 --set train.report=false --set checkpoint.save_final=false --set checkpoint.interval=0 \
  --set train.out_dir="$out" "$@" > "$out.log" 2>&1 &
launcher=$!
: > "$out.sched"
while kill -0 "$launcher" 2>/dev/null; do
  now=$(date +%s.%N)
  for p in $(pgrep -P "$launcher"); do
    for t in /proc/$p/task/*; do
      s=$(cat "$t/schedstat" 2>/dev/null) && echo "$now $p ${t##*/} $s" >> "$out.sched"
    done
  done
  sleep 0.05
done
wait "$launcher" || { tail -5 "$out.log"; exit 1; }
python3 - "$out" << 'PY'
import json, statistics, sys
out = sys.argv[1]
rows = [l.split() for l in open(out + ".sched") if len(l.split()) == 6]
t0, t1 = float(rows[0][0]), float(rows[-1][0]); start = t0 + 0.4 * (t1 - t0)
first, last = {}, {}
for r in rows:
    if float(r[0]) < start: continue
    key = (r[1], r[2]); v = (float(r[0]), int(r[3]), int(r[4]), int(r[5]))
    first.setdefault(key, v); last[key] = v
for key in sorted(first):
    a, b = first[key], last[key]
    cpu, wait, wall = (b[1] - a[1]) / 1e6, (b[2] - a[2]) / 1e6, (b[0] - a[0]) * 1e3
    if cpu + wait < 1: continue
    print(f"rank pid {key[0]} thread {key[1]}: over {wall:.0f} ms, cpu {cpu:.1f} ms, runnable not running {wait:.1f} ms "
          f"({100 * wait / wall:.0f}%), {(b[3] - a[3]) / wall * 1e3:.0f} switches/s")
steps = [json.loads(l) for l in open(out + "/metrics.jsonl")]
print("median step (after 2) %.1f ms" % statistics.median(m["step_ms"] for m in steps if m["step"] > 2))
ev = json.load(open(out + "/trace.json")); ev = ev["traceEvents"] if isinstance(ev, dict) else ev
spans, waits = {}, {}
for e in ev:
    if e.get("ph") != "X" or e.get("pid") != 0: continue
    spans[e["cat"]] = spans.get(e["cat"], 0) + e["dur"] / 1e3
    for k, v in e.get("args", {}).items():
        if k.startswith("wait_"): waits[k[5:-3]] = waits.get(k[5:-3], 0) + v / 1e3
print("traced step, pp rank 0: " + ", ".join(f"{k} {v:.1f}" for k, v in sorted(spans.items())) + " | waits: " +
      ", ".join(f"{k} {v:.1f}" for k, v in sorted(waits.items())))
PY
