#!/usr/bin/env bash
# Proof against published runs: re-simulates the rows of Table 1 of Narayanan et al., "Efficient Large-Scale
# Language Model Training on GPU Clusters Using Megatron-LM" (SC'21, arXiv 2104.04473): GPT models from 1.7B
# to 1T parameters on up to 3072 A100 80GB GPUs (vocabulary 51,200, sequence 2048), with their tp, pp, GPU
# count and batch, through `cleave simulate --config --profile profiles/a100_80gb_sxm.json`, and prints the
# predicted against the published teraFLOP/s per GPU. FLOPs per step are the paper's own count (its
# equation 3, which includes activation recomputation): 96 B s l h^2 (1 + s / (6h) + V / (16 l h)).
# The schedule is the paper's: interleaved 1F1B where the authors' reproduction script for Table 1
# (Megatron-LM, examples/sc21/run_table_1.sh) sets layers per virtual stage (76B: 5 of 15 per rank, v 3;
# 145B: 5 of 10, v 2; 310B: 3 of 6, v 2; 530B: 1 of 3, v 3), plain 1F1B for the others (pp 1, 39B, 1T); its
# micro-batch sizes (16, 16, 16, 8, 4, 2, 2, 1, 1, 1), full recomputation ("uniform"), and the scatter/gather of
# boundary tensors across the tp group (`--scatter-gather`: each tp rank sends 1/tp of a boundary tensor, the
# receiving group all-gathers it over NVLink). Assumptions: bf16, AdamW, Cleave's GPT (no dropout). The profile
# prices each block's kernels with a roofline (peak x an assumed GEMM efficiency curve, elementwise work at
# memory bandwidth). Published figures are transcribed from the paper's Table 1 (the 1T row's 163 teraFLOP/s x
# 3072 GPUs = the 502 petaFLOP/s the paper's abstract states).
# SCHEDULE=1f1b (environment) reruns the earlier assumption instead: plain 1F1B, micro-batch 1 with pp > 1 and 4
# without, whole boundary tensors.
# Usage: benchmarks/planner/megatron_table1.sh [BUILD_DIR]
set -euo pipefail
build=${1:-build}
root=$(cd "$(dirname "$0")/../.." && pwd)
cleave="$root/$build/bin/cleave"
[ -x "$cleave" ] || cleave="$build/bin/cleave"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
schedule_mode=${SCHEDULE:-paper}
# params(B) heads hidden layers tp pp gpus batch micro virtual published_tflops_per_gpu
rows="1.7 24 2304 24 1 1 32 512 16 1 137
3.6 32 3072 30 2 1 64 512 16 1 138
7.5 32 4096 36 4 1 128 512 16 1 142
18.4 48 6144 40 8 1 256 1024 8 1 135
39.1 64 8192 48 8 2 512 1536 4 1 138
76.1 80 10240 60 8 4 1024 1792 2 3 140
145.6 96 12288 80 8 8 1536 2304 2 2 148
310.1 128 16384 96 8 16 1920 2160 1 2 155
529.6 128 20480 105 8 35 2520 2520 1 3 163
1008.0 160 25600 128 8 64 3072 3072 1 1 163"
printf "%-8s %4s %4s %5s %6s %5s %2s %10s %10s %10s %7s\n" "params" "tp" "pp" "gpus" "batch" "micro" "v" "step_s" "predicted" \
  "published" "ratio"
echo "$rows" | while read -r params heads hidden layers tp pp gpus batch micro virtual published; do
  schedule=$([ "$virtual" -gt 1 ] && echo interleaved_1f1b || echo 1f1b)
  extra=(--scatter-gather)
  if [ "$schedule_mode" = 1f1b ]; then
    micro=$([ "$pp" -gt 1 ] && echo 1 || echo 4); virtual=1; schedule=1f1b; extra=()
  fi
  cat > "$work/cfg.json" << JSON
{
  "model": {"type": "gpt", "vocab_size": 51200, "d_model": $hidden, "n_layers": $layers, "n_heads": $heads,
            "seq_len": 2048},
  "parallel": {"tensor_model_parallel_size": $tp, "pipeline_model_parallel_size": $pp, "schedule": "$schedule",
               "virtual_pipeline_stages": $virtual},
  "batch": {"global_batch_size": $batch, "micro_batch_size": $micro},
  "optimizer": {"type": "adamw"},
  "train": {"recompute": "full"},
  "device": {"type": "cpu", "precision": "bf16"},
  "data": {"type": "synthetic"}
}
JSON
  "$cleave" simulate --config "$work/cfg.json" --world "$gpus" --profile "$root/profiles/a100_80gb_sxm.json" --json \
    "${extra[@]}" \
    > "$work/out.json" || true
  python3 - "$work/out.json" "$params" "$tp" "$pp" "$gpus" "$batch" "$hidden" "$layers" "$micro" "$virtual" "$published" << 'PY'
import json, sys
out = json.load(open(sys.argv[1]))
params, tp, pp, gpus, batch, h, l, micro, v, published = sys.argv[2], *map(int, sys.argv[3:11]), float(sys.argv[11])
s, V = 2048, 51200
flops = 96 * batch * s * l * h * h * (1 + s / (6 * h) + V / (16 * l * h))
predicted = flops / out["step_s"] / gpus / 1e12
fits = "" if out["fits"] else "  (over 80 GiB in Cleave's memory plan)"
print(f"{params:<8} {tp:4d} {pp:4d} {gpus:5d} {batch:6d} {micro:5d} {v:2d} {out['step_s']:10.2f} {predicted:10.1f} {published:10.1f} {predicted / published:7.2f}{fits}")
PY
done
