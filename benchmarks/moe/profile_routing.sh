#!/usr/bin/env bash
# Predicted against measured step time of two moe models after `cleave profile` (RESULTS-2026-11-30-d-profile-routing.md):
# examples/moe/config.json and a d-256 8-expert model, each at one rank (profiled alone), dp2 (ep1) and ep2 (both
# profiled under mpiexec -n 2). Per model and rank count: `cleave profile` (tp 1, the config's micro-batch), then per
# layout `cleave simulate --config --json` (the prediction) and `cleave train` of STEPS steps under mpiexec (the
# median step_ms of metrics.jsonl after the first 3). Prints one row per layout.
# Usage: benchmarks/moe/profile_routing.sh CLEAVE OUTDIR [STEPS] [ROUNDS]
set -euo pipefail
cleave=$(realpath "$1"); out=$2; steps=${3:-12}; rounds=${4:-3}
root=$(cd "$(dirname "$0")/../.." && pwd)
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl_vader_single_copy_mechanism=none
mkdir -p "$out"
cat > "$out/d256.json" << 'JSON'
{
  "model": { "type": "moe", "vocab_size": 256, "d_model": 256, "n_layers": 2, "n_heads": 4, "seq_len": 64,
             "ffn_hidden_size": 256, "n_experts": 8, "top_k": 2, "router": "softmax", "aux_loss_coef": 0.01 },
  "batch": { "global_batch_size": 16, "micro_batch_size": 4 },
  "optimizer": { "type": "adamw", "lr": 0.001 },
  "train": { "seed": 7, "log_interval": 1000, "eval_batches": 0, "report": false },
  "checkpoint": { "save_final": false },
  "data": { "type": "synthetic" },
  "device": { "type": "cpu", "precision": "fp32" }
}
JSON
sed -e 's/"log_interval": 50/"log_interval": 1000/' -e 's/"eval_interval": 100/"eval_interval": 100000/' \
  "$root/examples/moe/config.json" > "$out/example.json"
median() { python3 -c "import json,statistics,sys; r=[json.loads(l) for l in open(sys.argv[1]) if l.strip()]; print('%.3f' % statistics.median([x['step_ms'] for x in r[3:]]))" "$1"; }
for model in example d256; do
  micro=$(python3 -c "import json; print(json.load(open('$out/$model.json'))['batch']['micro_batch_size'])")
  for ranks in 1 2; do
    prof="$out/$model-np$ranks.json"
    rm -f "$prof"
    mpiexec -n "$ranks" "$cleave" profile "$out/$model.json" --out "$prof" --world "$ranks" --tp 1 \
      --micro-batches "$micro" --rounds "$rounds" --set parallel.data_parallel_size="$ranks" < /dev/null \
      > "$out/$model-np$ranks.log" 2>&1 || { tail "$out/$model-np$ranks.log"; exit 1; }
    grep -i -m4 "routed\|expert" "$out/$model-np$ranks.log" || true
    if [ "$ranks" = 1 ]; then layouts="dp1"; else layouts="dp2 ep2"; fi
    for layout in $layouts; do
      sets=(--set parallel.data_parallel_size="$ranks")
      [ "$layout" = ep2 ] && sets+=(--set parallel.expert_model_parallel_size=2)
      pred=$("$cleave" simulate --config "$out/$model.json" --world "$ranks" --profile "$prof" "${sets[@]}" --json \
        | python3 -c "import json,sys; j=json.load(sys.stdin); print('%.3f' % (1e3 * j['step_s']))")
      run="$out/run-$model-$layout"
      rm -rf "$run"
      OMP_WAIT_POLICY=passive mpiexec -n "$ranks" --mca btl self,vader "$cleave" train "$out/$model.json" "${sets[@]}" \
        --set train.steps="$steps" --set train.out_dir="$run" < /dev/null > "$run.log" 2>&1 || { tail "$run.log"; exit 1; }
      meas=$(median "$run/metrics.jsonl")
      echo "$model $layout predicted_ms $pred measured_ms $meas ratio $(python3 -c "print('%.2f' % ($meas / $pred))")"
    done
  done
done
