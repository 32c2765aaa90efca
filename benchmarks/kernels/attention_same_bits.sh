#!/usr/bin/env bash
# Whether two attention_shapes_bench binaries give the same bits: each writes one forward + backward's operands and
# results (--dump: q, k, v, dout, out, dq, dk, dv, lse) for every shape below, and the files are compared byte for
# byte. Shapes: B x Hq / Hkv in {2 x 6/2 (GQA), 1 x 4/4, 3 x 8/8}, T in {1, 17, 63, 64, 65, 130}, head dim in
# {6, 32, 64}, f32 and bf16 (value paths auto and gemm), 1 and 2 threads: 324 comparisons. Prints the count of
# identical ones and each difference; exits 1 on any.
# usage: benchmarks/kernels/attention_same_bits.sh BEFORE AFTER
set -euo pipefail
before=$1 after=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
same=0 differ=0
for heads in "2 6 2" "1 4 4" "3 8 8"; do
  for t in 1 17 63 64 65 130; do
    for hd in 6 32 64; do
      for run in "f32 auto" "bf16 auto" "bf16 gemm"; do
        set -- $run
        for threads in 1 2; do
          for b in before after; do
            OMP_NUM_THREADS=$threads "${!b}" $heads $t $hd $1 1 --dump "$work/$b" --value-path $2 > /dev/null
          done
          if cmp -s "$work/before" "$work/after"; then
            same=$((same + 1))
          else
            differ=$((differ + 1))
            echo "differ: B Hq Hkv $heads T $t hd $hd $1 value path $2 threads $threads"
          fi
        done
      done
    done
  done
done
echo "identical $same of $((same + differ))"
[ "$differ" -eq 0 ]
