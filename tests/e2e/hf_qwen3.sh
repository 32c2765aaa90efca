#!/usr/bin/env bash
# Qwen3 Hugging Face checkpoints through the CLI, on fixtures this test writes itself (hf_fixture.py; no torch):
# Qwen3ForCausalLM (model.type llama with model.qk_norm: per-head q/k RMSNorm before rope) and Qwen3MoeForCausalLM
# (model.type moe with qk_norm, 4 experts, top-2, norm_topk_prob false):
#  - import -> export --format hf writes every HF tensor byte-identical to the fixture's (q_norm / k_norm and the
#    per-expert slices included) and a config.json of the same class, and re-imports bit-exactly;
#  - train --init-from at tp2 (the q/k norms' gradient summed over the heads' ranks) and pp2 (mpiexec -n 2) has
#    the one-rank first-step loss, not a fresh model's (training at every layout: e2e_llama_equivalence's
#    qk_norm layouts);
#  - an import with max_position_embeddings 4096 trains at seq_len 1024 with max_seq_len 4096 (as llama's), and
#    --init-from takes a shorter seq_len;
#  - refused with one error line, nothing written: mlp_only_layers, decoder_sparse_step, Qwen3's attention_bias.
# Usage: hf_qwen3.sh CLEAVE SOURCE_DIR MPIEXEC [FLAGS...]
src=$(realpath "$2")
source "$(dirname "$0")/mpi_script_setup.sh" "$(realpath "$1")" "${@:3}"  # cleave, mpiexec, $work entered
source "$src/tests/e2e/hf_lib.sh"
fixture q3 --qwen3
fixture q3m --qwen3moe

for m in q3 q3m; do
  import_export_round_trip $m ck_$m exported_$m
  python3 - $m/config.json exported_$m/config.json <<'PY' || fail "export config $m"
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:])
assert b["architectures"] == a["architectures"] and b["model_type"] == a["model_type"], b
for key in ("num_experts_per_tok", "moe_intermediate_size", "norm_topk_prob", "head_dim"):
    assert a.get(key) == b.get(key), (key, a.get(key), b.get(key))
print(f"ok   {a['architectures'][0]}: export --format hf writes the same class and sizes")
PY
done

common=(--set train.steps=1 --set train.eval_batches=0 --set checkpoint.save_final=false)
for m in q3 q3m; do
  "$cleave" train --init-from $m "${common[@]}" --set train.out_dir=one_$m > one.log 2>&1 || { cat one.log; fail "$m one rank"; }
  "${mpiexec[@]}" -n 2 "$cleave" train --init-from ck_$m "${common[@]}" --set parallel.tensor_model_parallel_size=2 \
    --set train.out_dir=tp2_$m > tp2.log 2>&1 || { cat tp2.log; fail "$m tp2"; }
  "${mpiexec[@]}" -n 2 "$cleave" train --init-from $m "${common[@]}" --set parallel.pipeline_model_parallel_size=2 \
    --set train.out_dir=pp2_$m > pp2.log 2>&1 || { cat pp2.log; fail "$m pp2"; }
  # A fresh model of the same sizes: the imported weights must give another loss.
  "$cleave" train "${common[@]}" --set model.type=$([ $m = q3 ] && echo llama || echo moe) --set model.vocab_size=261 \
    --set model.d_model=16 --set model.n_heads=4 --set model.n_kv_heads=2 --set model.seq_len=12 \
    --set model.ffn_hidden_size=24 --set model.qk_norm=true --set train.out_dir=fresh_$m > fresh.log 2>&1 \
    || { cat fresh.log; fail "$m fresh"; }
  init_losses_agree $m one_$m fresh_$m tp2=tp2_$m pp2=pp2_$m
done

fixture long --qwen3moe --max-positions 4096
"$cleave" import long --out ck_long > long.log 2>&1 || { cat long.log; fail "import long"; }
grep -rhoE '"(seq_len|max_seq_len)": *[0-9]+' ck_long/step_0000000/index.json | sort -u | tr '\n' ' ' > lens.txt
grep -q '"seq_len": *1024' lens.txt && grep -q '"max_seq_len": *4096' lens.txt \
  || { cat lens.txt; fail "a moe import trains at min(max_position_embeddings, 1024)"; }
"$cleave" train --init-from long "${common[@]}" --set model.seq_len=8 --set train.out_dir=short > short.log 2>&1 \
  || { cat short.log; fail "--init-from at a shorter seq_len"; }
grep -q "seq_len 8 of at most 4096" short.log || { cat short.log; fail "no 'seq_len 8 of at most 4096' line"; }
echo "ok   qwen3-moe with max_position_embeddings 4096: imported at seq_len 1024 (max_seq_len 4096); --init-from at 8"

edit q3m dense mlp_only_layers "[1]"
refuse "mlp_only_layers" "mlp_only_layers is [1]" out1 -- "$cleave" import dense --out out1
edit q3m step decoder_sparse_step 2
refuse "decoder_sparse_step" "decoder_sparse_step is 2" out2 -- "$cleave" import step --out out2
edit q3 biased attention_bias true
refuse "Qwen3 attention_bias" "attention_bias is true" out3 -- "$cleave" import biased --out out3
echo "all ok"
