#!/usr/bin/env bash
# Mixture-of-experts Hugging Face checkpoints through the CLI, on fixtures this test writes itself
# (hf_fixture.py --mixtral: a tiny MixtralForCausalLM, 4 experts, top-2, one tensor per expert; no torch):
#  - import of the one-file and the sharded directory give the same Cleave weights byte for byte;
#  - import -> export --format hf writes every HF tensor byte-identical to the fixture's (the per-expert
#    slices of Cleave's stacked expert tensors), and re-imports bit-exactly;
#  - train --init-from at tp2 and pp2 (mpiexec -n 2) has the one-rank first-step loss, not a fresh model's;
#  - Qwen2MoeForCausalLM (hf_fixture.py --qwen2moe: q/k/v biases, a shared expert twice the experts' width with
#    its sigmoid gate, norm_topk_prob false): import -> export byte-identical and the same class and sizes back;
#    train --init-from at tp2 with sequence parallelism and at pp2 has the one-rank first-step loss;
#  - refused with one error line, nothing written: a class Cleave does not build (DeepseekV3ForCausalLM, named),
#    an expert count or top-k in the config that differs from the checkpoint's (both numbers),
#    router_jitter_noise, a Qwen2-MoE shared_expert_intermediate_size that is no multiple of
#    moe_intermediate_size, its use_sliding_window and mlp_only_layers; a tensor missing or a config.json that
#    contradicts itself at import, --init-from and cleave run -- --init-from with exit 64 (bad input), no job;
#  - cleave run -- --init-from at ep2 with a rank killed: restarted and completed (the supervisor plans for the weights'
#    model).
# Usage: hf_moe.sh CLEAVE SOURCE_DIR MPIEXEC [FLAGS...]
src=$(realpath "$2")
source "$(dirname "$0")/mpi_script_setup.sh" "$(realpath "$1")" "${@:3}"  # cleave, mpiexec, $work entered
source "$src/tests/e2e/hf_lib.sh"
fixture mix --mixtral
fixture mix_sharded --mixtral --shards 3

import_export_round_trip mix mk exported
"$cleave" import mix_sharded --out mk_sharded > import2.log 2>&1 || { cat import2.log; fail "import sharded"; }
cmp -s mk/step_0000000/weights.safetensors mk_sharded/step_0000000/weights.safetensors || fail "shards differ"
python3 - exported/config.json <<'PY' || fail "export config"
import json, sys
c = json.load(open(sys.argv[1]))
assert c["architectures"] == ["MixtralForCausalLM"] and c["num_local_experts"] == 4 and c["num_experts_per_tok"] == 2, c
assert c["router_aux_loss_coef"] == 0.02, c
print("ok   config.json Mixtral E4 k2")
PY
echo "ok   mixtral: one file and 3 shards import the same; export re-imports bit-exact"

common=(--set train.steps=1 --set train.eval_batches=0 --set checkpoint.save_final=false)
"$cleave" train --init-from mix "${common[@]}" --set train.out_dir=one > one.log 2>&1 || { cat one.log; fail "one rank"; }
"${mpiexec[@]}" -n 2 "$cleave" train --init-from mk "${common[@]}" --set parallel.tensor_model_parallel_size=2 \
  --set train.out_dir=tp2 > tp2.log 2>&1 || { cat tp2.log; fail "tp2"; }
"${mpiexec[@]}" -n 2 "$cleave" train --init-from mix "${common[@]}" --set parallel.pipeline_model_parallel_size=2 \
  --set train.out_dir=pp2 > pp2.log 2>&1 || { cat pp2.log; fail "pp2"; }
"$cleave" train "${common[@]}" --set model.type=moe --set model.vocab_size=261 --set model.d_model=16 \
  --set model.n_heads=4 --set model.n_kv_heads=2 --set model.seq_len=12 --set model.ffn_hidden_size=24 \
  --set train.out_dir=fresh > fresh.log 2>&1 || { cat fresh.log; fail "fresh"; }
grep -q "init: parameters from Hugging Face MixtralForCausalLM in mix" one.log || { cat one.log; fail "no init line"; }
init_losses_agree mixtral one fresh "tp2 (from the checkpoint)=tp2" pp2=pp2

fixture qwen --qwen2moe
import_export_round_trip qwen ck_qwen exported_qwen
python3 - qwen/config.json exported_qwen/config.json <<'PY' || fail "export config qwen2-moe"
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:])
for key in ("architectures", "model_type", "num_experts", "num_experts_per_tok", "moe_intermediate_size",
            "shared_expert_intermediate_size", "norm_topk_prob", "qkv_bias"):
    assert a.get(key) == b.get(key), (key, a.get(key), b.get(key))
print(f"ok   Qwen2MoeForCausalLM: export --format hf writes the same class and sizes")
PY
"$cleave" train --init-from qwen "${common[@]}" --set train.out_dir=one_q > one_q.log 2>&1 || { cat one_q.log; fail "qwen2-moe one rank"; }
"${mpiexec[@]}" -n 2 "$cleave" train --init-from ck_qwen "${common[@]}" --set parallel.tensor_model_parallel_size=2 \
  --set parallel.sequence_parallel=true --set train.out_dir=tp2_q > tp2_q.log 2>&1 || { cat tp2_q.log; fail "qwen2-moe tp2"; }
"${mpiexec[@]}" -n 2 "$cleave" train --init-from qwen "${common[@]}" --set parallel.pipeline_model_parallel_size=2 \
  --set train.out_dir=pp2_q > pp2_q.log 2>&1 || { cat pp2_q.log; fail "qwen2-moe pp2"; }
grep -q "init: parameters from Hugging Face Qwen2MoeForCausalLM in qwen" one_q.log || { cat one_q.log; fail "no qwen2-moe init line"; }
init_losses_agree qwen2-moe one_q fresh "tp2 sp=tp2_q" pp2=pp2_q
edit qwen deepseek architectures '["DeepseekV3ForCausalLM"]'
python3 -c "
import json; p = 'deepseek/config.json'; c = json.load(open(p)); c['model_type'] = 'deepseek_v3'; json.dump(c, open(p, 'w'))"
refuse "DeepSeek-V3" "architecture DeepseekV3ForCausalLM is not supported" out1 -- "$cleave" import deepseek --out out1
edit qwen odd_shared shared_expert_intermediate_size 36
refuse "Qwen2-MoE shared width" "shared_expert_intermediate_size 36 is not a positive multiple of moe_intermediate_size 24" \
  out5 -- "$cleave" import odd_shared --out out5
edit qwen windowed use_sliding_window true
refuse "Qwen2-MoE window" "use_sliding_window is true" out6 -- "$cleave" import windowed --out out6
edit qwen dense_q mlp_only_layers "[0]"
refuse "Qwen2-MoE dense layer" "mlp_only_layers is [0]" out7 -- "$cleave" import dense_q --out out7
refuse_input "expert count" "model.n_experts is 8 in the config, but 4 in mix/config.json" run2 -- \
  "$cleave" train --init-from mix --set model.n_experts=8 --set train.out_dir=run2
refuse_input "top-k" "model.top_k is 1 in the config, but 2 in mix/config.json" run3 -- \
  "$cleave" train --init-from mix --set model.top_k=1 --set train.out_dir=run3
# A directory whose files do not agree is bad input (exit 64) at import, --init-from and under cleave run, which
# stops before any job (they exited 1: cleave run measured the machine and spent every restart on the same error).
fixture dropped --mixtral --drop model.layers.1.block_sparse_moe.experts.3.w2.weight
dropped_msg="dropped: missing tensor model.layers.1.block_sparse_moe.experts.3.w2.weight"
refuse_input "import, a tensor missing" "$dropped_msg" out8 -- "$cleave" import dropped --out out8
refuse_input "--init-from, a tensor missing" "$dropped_msg" run4 -- "$cleave" train --init-from dropped --set train.out_dir=run4
edit mix kv3 num_key_value_heads 3
refuse_input "--init-from, config.json's heads" "num_attention_heads 4 is not a multiple of num_key_value_heads 3" run5 -- \
  "$cleave" train --init-from kv3 --set train.out_dir=run5
# cleave run reads config.json before any job (a contradiction there: exit 64, no job), the tensors in the job
# (a tensor missing: the first attempt's exit 64 stops it at once, no restart spent).
refuse_input "cleave run -- --init-from, config.json's heads" "num_attention_heads 4 is not a multiple of num_key_value_heads 3" \
  run6 -- "$cleave" run --slots 2 --launcher "${mpiexec[*]}" -- --init-from kv3 --set train.out_dir=run6
! grep -q "run: attempt" bad.log || { cat bad.log; fail "cleave run started a job for a bad --init-from config.json"; }
"$cleave" run --slots 2 --launcher "${mpiexec[*]}" -- --init-from dropped --set train.out_dir=run7 > run7.log 2>&1 \
  && { cat run7.log; fail "cleave run -- --init-from dropped: accepted"; }
grep -q "$dropped_msg" run7.log &&
  grep -q "run: giving up at once, a restart cannot cure this (0 of --max-restarts 3 restarts made, the rest not spent): the job refused its command line or config before any work (bad input, exit 64; " run7.log &&
  [ "$(grep -c '^run: attempt' run7.log)" -eq 1 ] || { cat run7.log; fail "cleave run spent restarts on a tensor missing"; }
echo "ok   cleave run -- --init-from, a tensor missing: stopped after the first attempt, no restart spent"
cp -r mix jitter && python3 -c "
import json; c = json.load(open('jitter/config.json')); c['router_jitter_noise'] = 0.1; json.dump(c, open('jitter/config.json', 'w'))"
refuse "router jitter" "router_jitter_noise is 0.1" out4 -- "$cleave" import jitter --out out4
# cleave run with --init-from: the supervisor takes the model keys from the weights as train does (it read the
# config alone, a default GPT, so it refused parallel.expert_model_parallel_size for a model "that has none" and
# re-planned restarts for the wrong model). Rank 1 SIGKILLed in step 3 (attempt 1 only): the job restarts on the
# rank left from step 2's checkpoint, re-planned for the mixture, and completes.
# The re-plan's profile is a CPU one, as the job runs on the CPU (cleave run refuses another device's): the shipped
# H100 profile's numbers as a fixed cpu machine of 8 cores, so the choice does not depend on this machine's timing.
python3 -c "
import json, sys
p = json.load(open(sys.argv[1])); p.update(device_type='cpu', cores_per_node=8)
json.dump(p, open(sys.argv[2], 'w'))" "$src/profiles/h100_sxm.json" cpu_profile.json || fail "cpu_profile.json"
CLEAVE_FAULT_INJECT_1=1:3:forward:kill "$cleave" run --slots 2 --max-restarts 1 --profile cpu_profile.json \
  --launcher "${mpiexec[*]}" -- --init-from mix --set parallel.expert_model_parallel_size=2 --set train.steps=4 \
  --set train.eval_batches=0 --set checkpoint.interval=2 --set batch.global_batch_size=4 --set batch.micro_batch_size=1 \
  --set train.report=false --set train.out_dir=supervised > supervised.log 2>&1 \
  || { cat supervised.log; fail "cleave run --init-from with ep2"; }
grep -q "run: completed after 1 restart" supervised.log || { cat supervised.log; fail "cleave run --init-from: no restart"; }
grep -q '"type": "moe"' supervised/config.json || { cat supervised/config.json; fail "cleave run --init-from: not the moe model"; }
echo "ok   cleave run -- --init-from mix at ep2: rank 1 killed, restarted on 1 rank, completed"
echo "all ok"
