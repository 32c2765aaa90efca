#!/usr/bin/env bash
# Attention forward + backward time of two attention_shapes_bench binaries, interleaved: per round BEFORE then AFTER
# at B 16, Hq = Hkv = 8, causal, head dim HD, DTYPE, OMP_NUM_THREADS=THREADS, each printing the median of REPS calls
# after a warm-up call; prints, per T, the medians over ROUNDS and after / before. Hold the build lock around it on a
# shared machine (flock /work/build.lock ...).
# usage: benchmarks/kernels/attention_ab.sh BEFORE AFTER ROUNDS REPS THREADS f32|bf16 HD T...
set -euo pipefail
before=$1 after=$2 rounds=$3 reps=$4 threads=$5 dtype=$6 hd=$7
shift 7
ms() { OMP_NUM_THREADS=$threads "$1" 16 8 8 "$2" "$hd" "$dtype" "$reps" | awk '{for (i = 1; i < NF; ++i) if ($i == "ms") print $(i + 1)}'; }
for t in "$@"; do
  b=() a=()
  for ((r = 0; r < rounds; ++r)); do
    b+=("$(ms "$before" "$t")"); a+=("$(ms "$after" "$t")")
  done
  python3 -c "
import statistics as s
b = [float(x) for x in '${b[*]}'.split()]; a = [float(x) for x in '${a[*]}'.split()]
print(f'T $t $dtype hd $hd threads $threads before {s.median(b):.3f} after {s.median(a):.3f} after/before {s.median(a) / s.median(b):.3f}')"
done
