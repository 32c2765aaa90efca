#!/usr/bin/env bash
# Mixture-of-experts Hugging Face checkpoints through the CLI, on fixtures this test writes itself
# (hf_fixture.py --mixtral: a tiny MixtralForCausalLM, 4 experts, top-2, one tensor per expert; no torch):
#  - import of the one-file and the sharded directory give the same Cleave weights byte for byte;
#  - import -> export --format hf writes every HF tensor byte-identical to the fixture's (the per-expert
#    slices of Cleave's stacked expert tensors), and re-imports bit-exactly;
#  - train --init-from at tp2 and pp2 (mpiexec -n 2) has the one-rank first-step loss, not a fresh model's;
#  - refused with one error line, nothing written: Qwen2MoeForCausalLM (named), an expert count or top-k in the
#    config that differs from the checkpoint's (both numbers), router_jitter_noise.
# Usage: hf_moe.sh CLEAVE SOURCE_DIR MPIEXEC [FLAGS...]
set -u
cleave=$1; src=$2; shift 2
mpiexec=("$@")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
source "$src/tests/e2e/hf_lib.sh"
fixture mix --mixtral
fixture mix_sharded --mixtral --shards 3

"$cleave" import mix --out mk > import.log 2>&1 || { cat import.log; fail "import"; }
"$cleave" import mix_sharded --out mk_sharded > import2.log 2>&1 || { cat import2.log; fail "import sharded"; }
cmp -s mk/step_0000000/weights.safetensors mk_sharded/step_0000000/weights.safetensors || fail "shards differ"
"$cleave" export mk --format hf --out exported > export.log 2>&1 || { cat export.log; fail "export"; }
same_hf_tensors mix/model.safetensors exported/model.safetensors
python3 - exported/config.json <<'PY' || fail "export config"
import json, sys
c = json.load(open(sys.argv[1]))
assert c["architectures"] == ["MixtralForCausalLM"] and c["num_local_experts"] == 4 and c["num_experts_per_tok"] == 2, c
assert c["router_aux_loss_coef"] == 0.02, c
print("ok   config.json Mixtral E4 k2")
PY
"$cleave" import exported --out mk_back > back.log 2>&1 || { cat back.log; fail "re-import"; }
cmp -s mk/step_0000000/weights.safetensors mk_back/step_0000000/weights.safetensors || fail "export does not round-trip"
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
python3 - "$(loss one)" "$(loss tp2)" "$(loss pp2)" "$(loss fresh)" <<'PY' || fail "losses"
import sys
one, tp2, pp2, fresh = map(float, sys.argv[1:])
for name, x in (("tp2", tp2), ("pp2", pp2)):
    assert abs(x - one) <= 1e-5 * abs(one), f"{name} first-step loss {x} != one rank's {one}"
assert abs(fresh - one) > 0.05, f"the imported model's loss {one} is a fresh model's {fresh}: weights not loaded?"
print(f"ok   --init-from mixtral first-step loss: one rank {one}, tp2 (from the checkpoint) {tp2}, pp2 {pp2}; fresh {fresh}")
PY

fixture qwen --qwen2moe
refuse "Qwen2-MoE" "architecture Qwen2MoeForCausalLM is not supported" out1 -- "$cleave" import qwen --out out1
refuse "expert count" "model.n_experts is 8 in the config, but 4 in mix/config.json" run2 -- \
  "$cleave" train --init-from mix --set model.n_experts=8 --set train.out_dir=run2
refuse "top-k" "model.top_k is 1 in the config, but 2 in mix/config.json" run3 -- \
  "$cleave" train --init-from mix --set model.top_k=1 --set train.out_dir=run3
cp -r mix jitter && python3 -c "
import json; c = json.load(open('jitter/config.json')); c['router_jitter_noise'] = 0.1; json.dump(c, open('jitter/config.json', 'w'))"
refuse "router jitter" "router_jitter_noise is 0.1" out4 -- "$cleave" import jitter --out out4
echo "all ok"
