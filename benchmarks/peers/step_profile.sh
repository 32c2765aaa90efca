#!/usr/bin/env bash
# Where a training step's CPU time goes, Cleave against PyTorch, on one model of cpu_train_bench.py (issue 39 part 4:
# "say where torch.compile is still ahead and why"). Each contender trains its warm-up steps first (torch.compile's
# compilation, Cleave's start-up and first touch), then `perf record -F 999` (cpu-clock; no -g) attaches for
# SECONDS of steady-state steps; the report gives the shares by library (dso) and the top symbols. Holding LOCK
# (the shared build lock) for the attached seconds only. The figures are shares of samples, not step times.
#   benchmarks/peers/step_profile.sh CLEAVE MODEL OUTDIR [SECONDS] [LOCK] [CONTENDERS]
#   CONTENDERS: comma-separated of cleave_fp32, cleave_bf16, torch_eager, torch_compile, torch_bf16
#   (default cleave_fp32,torch_compile). Needs perf and the venv of benchmarks/peers/venv.sh (VENV, default
#   /work/venv-peers).
set -euo pipefail
cleave=$(realpath "$1"); model=$2; out=$3; secs=${4:-10}; lock=${5:-}; who=${6:-cleave_fp32,torch_compile}
here=$(cd "$(dirname "$0")" && pwd)
venv=${VENV:-/work/venv-peers}
eval "$("$here/venv.sh" env "$venv")"
mkdir -p "$out"

attach() {  # attach NAME PID: perf for $secs seconds on PID, holding the lock; the report beside it
  local name=$1 pid=$2
  if [[ -n $lock ]]; then exec 9>>"$lock"; flock 9; fi
  perf record -F 999 -o "$out/$name.data" -p "$pid" -- sleep "$secs" 2>"$out/$name.perf.log" || true
  if [[ -n $lock ]]; then flock -u 9; exec 9>&-; fi
  kill "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
  perf report -i "$out/$name.data" --no-children --sort dso --stdio 2>/dev/null | grep -v '^#' | sed '/^$/d' \
    | head -12 >"$out/$name.dso.txt"
  perf report -i "$out/$name.data" --no-children --sort dso,symbol --stdio 2>/dev/null | grep -v '^#' \
    | sed '/^$/d' | head -40 >"$out/$name.symbols.txt"
  echo "== $name"; cat "$out/$name.dso.txt"
}

for c in ${who//,/ }; do
  if [[ $c == cleave_* ]]; then
    args=$("$venv/bin/python" -c "
import sys, shlex; sys.path.insert(0, '$here')
from cpu_train_bench import MODELS, cleave_args
print(shlex.join(cleave_args(MODELS['$model'], '${c#cleave_}', 100000)))")
    rm -rf "$out/$c.run"
    (eval "exec env CLEAVE_THREADS=2 '$cleave' train $args --set train.out_dir='$out/$c.run'") >"$out/$c.log" 2>&1 &
    pid=$!
    for _ in $(seq 1 120); do  # 3 steps logged (metrics.jsonl, a row a step), or 60 s
      [[ -s $out/$c.run/metrics.jsonl ]] && (($(wc -l <"$out/$c.run/metrics.jsonl") >= 3)) && break
      sleep 0.5
    done
  else
    rm -f "$out/$c.ready"
    "$venv/bin/python" -c "
import sys, os; sys.path.insert(0, '$here')
import torch; torch.set_num_threads(2)
from cpu_train_bench import MODELS, TorchContender
cfg = MODELS['$model']
c = TorchContender('$c', cfg, 4 * cfg['d'], '$c' == 'torch_compile', '$c' == 'torch_bf16')
for _ in range(3): c.step()
open('$out/$c.ready', 'w').close()
while True: c.step()" >"$out/$c.log" 2>&1 &
    pid=$!
    while [[ ! -e $out/$c.ready ]]; do sleep 0.5; done
  fi
  attach "$c" "$pid"
done
