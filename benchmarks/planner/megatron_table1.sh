#!/usr/bin/env bash
# Proof against published runs: re-simulates the rows of Table 1 of Narayanan et al., "Efficient Large-Scale
# Language Model Training on GPU Clusters Using Megatron-LM" (SC'21, arXiv 2104.04473): GPT models from 1.7B
# to 1T parameters on up to 3072 A100 80GB GPUs (vocabulary 51,200, sequence 2048), with their tp, pp, GPU
# count and batch, through `cleave simulate --config --profile profiles/a100_80gb_sxm.json`, and prints the
# predicted against the published teraFLOP/s per GPU. FLOPs per step are the paper's own count (its
# equation 3, which includes activation recomputation): 96 B s l h^2 (1 + s / (6h) + V / (16 l h)).
# Assumptions (not in the table): bf16, AdamW, full recomputation (as the paper), 1F1B, micro-batch 1 when
# pp > 1 and 4 when pp = 1; Cleave's GPT (no dropout). The profile prices each block's kernels with a roofline
# (peak x an assumed GEMM efficiency curve, elementwise work at memory bandwidth). Published figures are
# transcribed from the paper's Table 1 (the 1T row's 163 teraFLOP/s x 3072 GPUs = the 502 petaFLOP/s the
# paper's abstract states).
# Usage: benchmarks/planner/megatron_table1.sh [BUILD_DIR]
set -euo pipefail
build=${1:-build}
root=$(cd "$(dirname "$0")/../.." && pwd)
cleave="$root/$build/bin/cleave"
[ -x "$cleave" ] || cleave="$build/bin/cleave"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# params(B) heads hidden layers tp pp gpus batch published_tflops_per_gpu
rows="1.7 24 2304 24 1 1 32 512 137
3.6 32 3072 30 2 1 64 512 138
7.5 32 4096 36 4 1 128 512 142
18.4 48 6144 40 8 1 256 1024 135
39.1 64 8192 48 8 2 512 1536 138
76.1 80 10240 60 8 4 1024 1792 140
145.6 96 12288 80 8 8 1536 2304 148
310.1 128 16384 96 8 16 1920 2160 155
529.6 128 20480 105 8 35 2520 2520 163
1008.0 160 25600 128 8 64 3072 3072 163"
printf "%-8s %4s %4s %5s %6s %10s %10s %10s %7s\n" "params" "tp" "pp" "gpus" "batch" "step_s" "predicted" "published" "ratio"
echo "$rows" | while read -r params heads hidden layers tp pp gpus batch published; do
  micro=$([ "$pp" -gt 1 ] && echo 1 || echo 4)
  cat > "$work/cfg.json" << JSON
{
  "model": {"type": "gpt", "vocab_size": 51200, "d_model": $hidden, "n_layers": $layers, "n_heads": $heads,
            "seq_len": 2048},
  "parallel": {"tensor_model_parallel_size": $tp, "pipeline_model_parallel_size": $pp, "schedule": "1f1b"},
  "batch": {"global_batch_size": $batch, "micro_batch_size": $micro},
  "optimizer": {"type": "adamw"},
  "train": {"recompute": "full"},
  "device": {"type": "cpu", "precision": "bf16"},
  "data": {"type": "synthetic"}
}
JSON
  "$cleave" simulate --config "$work/cfg.json" --world "$gpus" --profile "$root/profiles/a100_80gb_sxm.json" --json \
    > "$work/out.json" || true
  python3 - "$work/out.json" "$params" "$tp" "$pp" "$gpus" "$batch" "$hidden" "$layers" "$published" << 'PY'
import json, sys
out = json.load(open(sys.argv[1]))
params, tp, pp, gpus, batch, h, l, published = sys.argv[2], *map(int, sys.argv[3:9]), float(sys.argv[9])
s, V = 2048, 51200
flops = 96 * batch * s * l * h * h * (1 + s / (6 * h) + V / (16 * l * h))
predicted = flops / out["step_s"] / gpus / 1e12
fits = "" if out["fits"] else "  (over 80 GiB in Cleave's memory plan)"
print(f"{params:<8} {tp:4d} {pp:4d} {gpus:5d} {batch:6d} {out['step_s']:10.2f} {predicted:10.1f} {published:10.1f} {predicted / published:7.2f}{fits}")
PY
done
