#!/usr/bin/env bash
# The composed-layout verify matrix (benchmarks/verify/RESULTS-2026-11-29-matrix.md): `cleave verify` of tiny gpt,
# llama and moe models at 3-way compositions of context parallelism (ring, all_to_all) with pipeline (zb_v,
# dualpipev, interleaved, zb_h2, manual partitions), tensor + sequence, data (ZeRO 2/3) and expert parallelism and
# recomputation, fp32 then bf16 (SGD); then checkpoints saved at one composed layout resumed at another, whose
# losses must continue as the uninterrupted runs' do. One line per run: name | exit status | summary.
# Usage: verify_matrix.sh CLEAVE [MPIEXEC...]   (default MPIEXEC: mpiexec --allow-run-as-root --oversubscribe)
set -u
cleave=$(realpath "$1"); shift
mpiexec=("$@")
[ ${#mpiexec[@]} -gt 0 ] || mpiexec=(mpiexec --allow-run-as-root --oversubscribe)
export OMP_WAIT_POLICY=passive OMP_NUM_THREADS=1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"

# SGD with momentum, lr warming up to 0.5 over 10 steps, clipped to a global norm of 0.2 (every step clips), weight
# decay 0.05; the moe with a 0.05 aux loss and a 0.01 z-loss. n_layers 4: two blocks per stage at pp 2 × 2 chunks.
cat > gpt.json <<'JSON'
{"model": {"type": "gpt", "vocab_size": 64, "d_model": 32, "n_layers": 4, "n_heads": 4, "seq_len": 16},
 "batch": {"global_batch_size": 8, "micro_batch_size": 2},
 "optimizer": {"type": "sgd", "lr": 0.5, "momentum": 0.9, "grad_clip": 0.2, "weight_decay": 0.05},
 "data": {"type": "synthetic"}}
JSON
cat > llama.json <<'JSON'
{"model": {"type": "llama", "vocab_size": 64, "d_model": 32, "n_layers": 4, "n_heads": 4, "n_kv_heads": 2,
           "seq_len": 16, "ffn_hidden_size": 48},
 "batch": {"global_batch_size": 8, "micro_batch_size": 2},
 "optimizer": {"type": "sgd", "lr": 0.5, "momentum": 0.9, "grad_clip": 0.2, "weight_decay": 0.05},
 "data": {"type": "synthetic"}}
JSON
cat > moe.json <<'JSON'
{"model": {"type": "moe", "vocab_size": 64, "d_model": 16, "n_layers": 4, "n_heads": 2, "seq_len": 8,
           "ffn_hidden_size": 12, "n_experts": 4, "top_k": 2, "aux_loss_coef": 0.05, "z_loss_coef": 0.01},
 "batch": {"global_batch_size": 8, "micro_batch_size": 2},
 "optimizer": {"type": "sgd", "lr": 0.5, "momentum": 0.9, "grad_clip": 0.2, "weight_decay": 0.05},
 "data": {"type": "synthetic"}}
JSON

# v NAME NP CONFIG STEPS [--set ...]: one `cleave verify`.
v() {
  local name=$1 np=$2 config=$3 steps=$4; shift 4
  local args=() kv
  for kv in "$@"; do args+=(--set "$kv"); done
  "${mpiexec[@]}" -n "$np" "$cleave" verify "$config" --steps "$steps" "${args[@]}" > "$name.log" 2>&1
  local status=$?
  local summary
  summary=$(grep -E '^max loss difference' "$name.log" | sed 's/ (tolerance [^)]*)//g')
  [ -n "$summary" ] || summary=$(grep -m1 -E '^error' "$name.log")
  echo "$name | $status | $summary"
}
cp2=parallel.context_parallel_size=2 a2a=parallel.context_parallel_comm=all_to_all
pp2=parallel.pipeline_model_parallel_size=2 tp2=parallel.tensor_model_parallel_size=2
sp=parallel.sequence_parallel=true ep2=parallel.expert_model_parallel_size=2 vpp2=parallel.virtual_pipeline_stages=2
full=train.recompute=full sel=train.recompute=selective bf16=device.precision=bf16
s() { echo "parallel.schedule=$1"; }
z() { echo "optimizer.zero_stage=$1"; }

echo "== fp32, 6 steps"
for m in gpt llama moe; do
  v ${m}_cp2-ring_pp2-zb_v_selective 4 $m.json 6 $cp2 $pp2 "$(s zb_v)" $sel
  v ${m}_cp2-ring_pp2-dualpipev_full 4 $m.json 6 $cp2 $pp2 "$(s dualpipev)" $full
  v ${m}_cp2-a2a_pp2-dualpipev_full 4 $m.json 6 $cp2 $a2a $pp2 "$(s dualpipev)" $full
  v ${m}_cp2-a2a_pp2-interleaved_selective 4 $m.json 6 $cp2 $a2a $pp2 "$(s interleaved_1f1b)" $vpp2 $sel
  v ${m}_cp2-ring_pp2-zb_h2_full 4 $m.json 6 $cp2 $pp2 "$(s zb_h2)" $full
  v ${m}_cp2-ring_dp2-zero2_selective 4 $m.json 6 $cp2 "$(z 2)" $sel
  v ${m}_cp2-a2a_dp2-zero3_full 4 $m.json 6 $cp2 $a2a "$(z 3)" $full
done
v gpt_cp2-a2a_tp2-sp_full 4 gpt.json 6 $cp2 $a2a $tp2 $sp $full
v gpt_cp2-ring_tp2-sp_selective 4 gpt.json 6 $cp2 $tp2 $sp $sel
v gpt_cp2-a2a_pp2-interleaved_untied 4 gpt.json 6 $cp2 $a2a $pp2 "$(s interleaved_1f1b)" model.tie_embeddings=false
v gpt_cp2-ring_pp2-zb_v_manual-1223 4 gpt.json 6 $cp2 $pp2 "$(s zb_v)" parallel.partition.method=manual \
    'parallel.partition.blocks_per_stage=[1,2,2,3]'
v gpt_cp2-ring_pp2-dualpipev_6-micro_selective 4 gpt.json 6 $cp2 $pp2 "$(s dualpipev)" batch.global_batch_size=6 \
    batch.micro_batch_size=1 $sel
v llama_cp2-ring_tp2-sp_selective 4 llama.json 6 $cp2 $tp2 $sp $sel
v llama_cp2-ring_tp2-sp_full_qkv-bias_tied 4 llama.json 6 $cp2 $tp2 $sp $full model.qkv_bias=true \
    model.tie_embeddings=true
v llama_cp2-a2a_dp2-zero2_selective_window5 4 llama.json 6 $cp2 $a2a "$(z 2)" $sel model.sliding_window=5
v llama_cp2-ring_pp2-dualpipev_qk-norm_window5-from2 4 llama.json 6 $cp2 $pp2 "$(s dualpipev)" model.qk_norm=true \
    model.sliding_window=5 model.sliding_window_from_layer=2
v llama_cp2-a2a_pp2-zb_v_one-micro-batch 4 llama.json 6 $cp2 $a2a $pp2 "$(s zb_v)" batch.global_batch_size=2
v moe_cp2-ring_tp2-sp_ep2_full 4 moe.json 6 $cp2 $tp2 $sp $ep2 $full
v moe_cp2-ring_tp2-sp_ep2_gated-shared_selective 4 moe.json 6 $cp2 $tp2 $sp $ep2 $sel model.n_shared_experts=1 \
    model.shared_expert_gate=true
v moe_cp2-a2a_ep2_selective 2 moe.json 6 $cp2 $a2a $ep2 $sel
v moe_cp2-ring_ep2_dp2-zero3_sigmoid-shared_selective 4 moe.json 6 $cp2 $ep2 "$(z 3)" $sel model.router=sigmoid \
    model.n_shared_experts=1 model.bias_update_rate=0
v moe_cp2-ring_ep2_dp2-zero1_sigmoid-bias-update 4 moe.json 6 $cp2 $ep2 "$(z 1)" model.router=sigmoid
v moe_cp2-a2a_ep2_dp2-zero2_full 4 moe.json 6 $cp2 $a2a $ep2 "$(z 2)" $full
v moe_cp2-ring_ep4_dp2-zero3_8-experts_top1 4 moe.json 6 $cp2 parallel.expert_model_parallel_size=4 "$(z 3)" \
    model.n_experts=8 model.top_k=1
v moe_cp2-ring_ep2_pp2-zb_v_zipf_selective 4 moe.json 6 $cp2 $pp2 "$(s zb_v)" $ep2 $sel model.forced_routing=zipf
v moe_cp2-a2a_ep2_pp2-interleaved_full 4 moe.json 6 $cp2 $a2a $pp2 "$(s interleaved_1f1b)" $vpp2 $ep2 $full
v moe_cp2-a2a_ep2_pp2-dualpipev-overlap_full 4 moe.json 6 $cp2 $a2a $pp2 "$(s dualpipev)" $ep2 \
    parallel.moe_a2a_overlap=true $full
v moe_cp2-ring_ep2_pp2-interleaved_manual-3113_full 4 moe.json 6 $cp2 $pp2 "$(s interleaved_1f1b)" $ep2 $full \
    parallel.partition.method=manual 'parallel.partition.blocks_per_stage=[3,1,1,3]'

echo "== fp32 AdamW (lr 0.01), 6 steps"
adamw=(optimizer.type=adamw optimizer.lr=0.01)
v adamw_gpt_cp2-ring_pp2-dualpipev_full 4 gpt.json 6 $cp2 $pp2 "$(s dualpipev)" $full "${adamw[@]}"
v adamw_llama_cp2-ring_tp2-sp_selective 4 llama.json 6 $cp2 $tp2 $sp $sel "${adamw[@]}"
v adamw_moe_cp2-a2a_ep2_dp2-zero3_full 4 moe.json 6 $cp2 $a2a $ep2 "$(z 3)" $full "${adamw[@]}"

echo "== bf16, SGD, 6 steps (and the tested single layouts beside them)"
v bf16_gpt_cp2-ring_pp2-dualpipev_full 4 gpt.json 6 $cp2 $pp2 "$(s dualpipev)" $full $bf16
v bf16_gpt_cp2-ring 2 gpt.json 6 $cp2 $bf16
v bf16_gpt_tp2 2 gpt.json 6 $tp2 $bf16
v bf16_llama_cp2-ring_tp2-sp_selective 4 llama.json 6 $cp2 $tp2 $sp $sel $bf16
v bf16_llama_cp2-ring 2 llama.json 6 $cp2 $bf16
v bf16_llama_tp2 2 llama.json 6 $tp2 $bf16
v bf16_llama_cp2-a2a_pp2-zb_v_full 4 llama.json 6 $cp2 $a2a $pp2 "$(s zb_v)" $full $bf16
v bf16_moe_cp2-ring_ep2_dp2-zero3_selective 4 moe.json 6 $cp2 $ep2 "$(z 3)" $sel $bf16
v bf16_moe_cp2-ring 2 moe.json 6 $cp2 $bf16
v bf16_moe_cp2-a2a_ep2_pp2-dualpipev_full 4 moe.json 6 $cp2 $a2a $pp2 "$(s dualpipev)" $ep2 $full $bf16
v bf16_gpt_cp2-a2a_dp2-zero2 4 gpt.json 6 $cp2 $a2a "$(z 2)" $bf16
v bf16_gpt_cp2-a2a_dp2-zero2_grad-bf16 4 gpt.json 6 $cp2 $a2a "$(z 2)" $bf16 parallel.grad_reduce_dtype=bf16
v bf16_gpt_dp2_grad-bf16 2 gpt.json 6 $bf16 parallel.grad_reduce_dtype=bf16
echo "== bf16, SGD, step 1 only (each bias is -lr x its gradient: the normalised difference is the gradient's)"
v bf16_step1_gpt_cp2-ring_pp2-dualpipev_full 4 gpt.json 1 $cp2 $pp2 "$(s dualpipev)" $full $bf16
v bf16_step1_llama_cp2-ring_tp2-sp_selective 4 llama.json 1 $cp2 $tp2 $sp $sel $bf16
v bf16_step1_gpt_tp2 2 gpt.json 1 $tp2 $bf16
v bf16_step1_llama_tp2 2 llama.json 1 $tp2 $bf16

# r NAME CONFIG NP1 "SETS1" NP2 "SETS2": 3 steps at layout 1 saved, resumed to 6 at layout 2; the resumed run's steps
# 4-6 against the uninterrupted 6-step runs at layout 1 and at layout 2 (max relative loss difference).
r() {
  local name=$1 config=$2 np1=$3 np2=$5 base=(--set train.deterministic=true --set train.eval_batches=0
                                                --set train.report=false --set checkpoint.background=false)
  local one=() two=() kv
  for kv in $4; do one+=(--set "$kv"); done
  for kv in $6; do two+=(--set "$kv"); done
  "${mpiexec[@]}" -n "$np1" "$cleave" train "$config" "${base[@]}" "${one[@]}" --set train.steps=3 \
      --set train.out_dir="$name/resumed" > "$name.a.log" 2>&1 || { echo "$name | first part failed"; return; }
  "${mpiexec[@]}" -n "$np2" "$cleave" train "$config" "${base[@]}" "${two[@]}" --set train.steps=6 \
      --set train.out_dir="$name/resumed" --resume "$name/resumed/checkpoints/step_0000003" > "$name.b.log" 2>&1 ||
      { echo "$name | resume failed"; return; }
  "${mpiexec[@]}" -n "$np1" "$cleave" train "$config" "${base[@]}" "${one[@]}" --set train.steps=6 \
      --set train.out_dir="$name/whole1" > "$name.w1.log" 2>&1
  "${mpiexec[@]}" -n "$np2" "$cleave" train "$config" "${base[@]}" "${two[@]}" --set train.steps=6 \
      --set train.out_dir="$name/whole2" > "$name.w2.log" 2>&1
  python3 - "$name" <<'PY'
import json, sys
d = sys.argv[1]
def losses(run):
    return {r["step"]: r["loss"] for r in map(json.loads, open(f"{d}/{run}/metrics.jsonl")) if "loss" in r}
got, one, two = losses("resumed"), losses("whole1"), losses("whole2")
diff = lambda ref: max(abs(got[s] - ref[s]) / abs(ref[s]) for s in (4, 5, 6))
print(f"{d} | steps {sorted(got)} | resumed steps 4-6 vs uninterrupted at layout 1 {diff(one):.3g}, "
      f"at layout 2 {diff(two):.3g}")
PY
}
echo "== resume across composed layouts (3 steps, then 3 more at the other layout)"
r resume_llama_cp2-pp2_to_tp2 llama.json 4 "$cp2 $pp2" 2 "$tp2"
r resume_moe_ep2-cp2-pp2-dualpipev_to_one-rank moe.json 4 "$cp2 $pp2 $ep2 $(s dualpipev)" 1 ""
r resume_moe_sigmoid_ep2-cp2-zero1_to_one-rank moe.json 4 "model.router=sigmoid $cp2 $ep2 $(z 1)" 1 \
    "model.router=sigmoid"
r resume_gpt_adamw_cp2-a2a-zero3_to_pp2-zb_v gpt.json 4 "${adamw[*]} $cp2 $a2a $(z 3)" 2 "${adamw[*]} $pp2 $(s zb_v)"
r resume_moe_adamw_ep2-cp2-zero3_to_tp2-sp moe.json 4 "${adamw[*]} $cp2 $ep2 $(z 3)" 2 "${adamw[*]} $tp2 $sp"
r resume_gpt_tp2-sp-pp2-dualpipev_to_cp2-a2a-zero2 gpt.json 4 "$tp2 $sp $pp2 $(s dualpipev)" 4 "$cp2 $a2a $(z 2)"
r resume_llama_bf16_cp2-pp2-zb_v_to_tp2-sp llama.json 4 "$bf16 $cp2 $pp2 $(s zb_v)" 2 "$bf16 $tp2 $sp"
