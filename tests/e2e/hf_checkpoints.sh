#!/usr/bin/env bash
# Hugging Face checkpoints through the CLI, on fixtures this test writes itself (hf_fixture.py: a tiny
# GPT2LMHeadModel and a tiny LlamaForCausalLM, one file and sharded with an index; no downloads, no torch):
#  - import of the one-file and the sharded directory give the same Cleave weights file byte for byte;
#  - import -> export --format hf (one file, and shards of --max-shard-size) -> import is bit-exact;
#  - train --init-from at tp2 and at pp2 (mpiexec -n 2) has the one-rank first-step loss, from the HF directory
#    and from the imported checkpoint, and that loss is not a fresh model's (GPT-2, then Llama);
#  - every bad input (missing shard, wrong shape, unknown architecture, unknown / missing tensor, a config
#    model key that disagrees, --resume of a weights-only checkpoint, an existing --out) is one error line
#    naming it, a non-zero exit, and nothing written.
# Usage: hf_checkpoints.sh CLEAVE SOURCE_DIR MPIEXEC [FLAGS...]
src=$(realpath "$2")
source "$(dirname "$0")/mpi_script_setup.sh" "$(realpath "$1")" "${@:3}"  # cleave, mpiexec, $work entered
source "$src/tests/e2e/hf_lib.sh"  # fail, fixture, loss, refuse
fixture hf
fixture hf_sharded --shards 3

"$cleave" import hf --out ck > import.log 2>&1 || { cat import.log; fail "import"; }
"$cleave" import hf_sharded --out ck_sharded > import2.log 2>&1 || { cat import2.log; fail "import sharded"; }
cmp -s ck/step_0000000/weights.safetensors ck_sharded/step_0000000/weights.safetensors \
  || fail "one-file and sharded imports differ"
echo "ok   import: one file and 3 shards give the same weights"

"$cleave" export ck --format hf --out exported > export.log 2>&1 || { cat export.log; fail "export"; }
[ -f exported/config.json ] && [ -f exported/model.safetensors ] || fail "export wrote $(ls exported)"
"$cleave" export ck --format hf --out exported_sharded --max-shard-size 8KiB > export2.log 2>&1 || { cat export2.log; fail "sharded export"; }
[ -f exported_sharded/model.safetensors.index.json ] || fail "no index for a sharded export: $(ls exported_sharded)"
for e in exported exported_sharded; do
  "$cleave" import $e --out back_$e > back.log 2>&1 || { cat back.log; fail "re-import $e"; }
  cmp -s ck/step_0000000/weights.safetensors back_$e/step_0000000/weights.safetensors || fail "$e does not round-trip bit-exact"
done
echo "ok   export --format hf -> import is bit-exact ($(ls exported_sharded | grep -c safetensors$) shards with an index too)"

common=(--set train.steps=1 --set train.eval_batches=0 --set checkpoint.save_final=false)
"$cleave" train --init-from hf "${common[@]}" --set train.out_dir=one > one.log 2>&1 || { cat one.log; fail "init one rank"; }
"${mpiexec[@]}" -n 2 "$cleave" train --init-from hf "${common[@]}" --set parallel.tensor_model_parallel_size=2 \
  --set train.out_dir=tp2 > tp2.log 2>&1 || { cat tp2.log; fail "init tp2"; }
"${mpiexec[@]}" -n 2 "$cleave" train --init-from ck "${common[@]}" --set parallel.pipeline_model_parallel_size=2 \
  --set train.out_dir=pp2 > pp2.log 2>&1 || { cat pp2.log; fail "init pp2"; }
"$cleave" train "${common[@]}" --set model.vocab_size=261 --set model.d_model=16 --set model.n_heads=4 \
  --set model.seq_len=12 --set model.d_ff=24 --set train.out_dir=fresh > fresh.log 2>&1 || { cat fresh.log; fail "fresh"; }
grep -q "init: parameters from Hugging Face GPT2LMHeadModel in hf (.*); the optimizer state starts fresh" one.log || { cat one.log; fail "no init line"; }
init_losses_agree gpt2 one fresh tp2=tp2 "pp2 (from the checkpoint)=pp2"

# Llama: the same, sharded import against one file, export round trip, tp2 and pp2 against one rank.
fixture llama --llama
fixture llama_sharded --llama --shards 2
"$cleave" import llama --out lk > limport.log 2>&1 || { cat limport.log; fail "llama import"; }
"$cleave" import llama_sharded --out lk_sharded > limport2.log 2>&1 || { cat limport2.log; fail "llama import sharded"; }
cmp -s lk/step_0000000/weights.safetensors lk_sharded/step_0000000/weights.safetensors || fail "llama: shards differ"
"$cleave" export lk --format hf --out lexported --max-shard-size 8KiB > lexport.log 2>&1 || { cat lexport.log; fail "llama export"; }
"$cleave" import lexported --out lk_back > lback.log 2>&1 || { cat lback.log; fail "llama re-import"; }
cmp -s lk/step_0000000/weights.safetensors lk_back/step_0000000/weights.safetensors || fail "llama export does not round-trip"
"$cleave" train --init-from llama "${common[@]}" --set train.out_dir=lone > lone.log 2>&1 || { cat lone.log; fail "llama one rank"; }
"${mpiexec[@]}" -n 2 "$cleave" train --init-from lk "${common[@]}" --set parallel.tensor_model_parallel_size=2 \
  --set train.out_dir=ltp2 > ltp2.log 2>&1 || { cat ltp2.log; fail "llama tp2"; }
"${mpiexec[@]}" -n 2 "$cleave" train --init-from llama "${common[@]}" --set parallel.pipeline_model_parallel_size=2 \
  --set train.out_dir=lpp2 > lpp2.log 2>&1 || { cat lpp2.log; fail "llama pp2"; }
"$cleave" train "${common[@]}" --set model.type=llama --set model.vocab_size=261 --set model.d_model=16 \
  --set model.n_heads=4 --set model.n_kv_heads=2 --set model.seq_len=12 --set model.ffn_hidden_size=24 \
  --set train.out_dir=lfresh > lfresh.log 2>&1 || { cat lfresh.log; fail "llama fresh"; }
echo "ok   llama (GQA 4/2): shards, export round trip"
init_losses_agree llama lone lfresh "tp2 (from the checkpoint)=ltp2" pp2=lpp2

# Bad inputs: one error line naming the problem, exit 1, nothing written.
cp -r hf_sharded no_shard && rm no_shard/model-00002-of-00003.safetensors
refuse "missing shard" "shard model-00002-of-00003.safetensors is missing" out1 -- "$cleave" import no_shard --out out1
fixture wrong_shape --reshape transformer.h.1.mlp.c_fc.weight
refuse "wrong shape" "transformer.h.1.mlp.c_fc.weight has shape [24,16]" out2 -- "$cleave" import wrong_shape --out out2
cp -r hf bert && python3 -c "
import json; c = json.load(open('bert/config.json')); c['architectures'] = ['BertModel']; json.dump(c, open('bert/config.json', 'w'))"
refuse "unknown architecture" "architecture BertModel is not supported" out3 -- "$cleave" import bert --out out3
fixture extra --extra transformer.h.0.attn.c_attn.scale
refuse "unknown tensor" "unknown tensor transformer.h.0.attn.c_attn.scale" out4 -- "$cleave" import extra --out out4
fixture missing --drop transformer.ln_f.bias
refuse "missing tensor" "missing tensor transformer.ln_f.bias" out5 -- "$cleave" import missing --out out5
echo '{"model": {"d_model": 32}}' > disagree.json
refuse "disagreeing model key" "model.d_model is 32 in disagree.json, but 16 in hf/config.json" run6 -- \
  "$cleave" train disagree.json --init-from hf --set train.out_dir=run6
refuse "disagreeing --set" "model.n_layers is 3" run7 -- \
  "$cleave" train --init-from hf --set model.n_layers=3 --set train.out_dir=run7
refuse "another model type" 'model.type is "mlp" in the config, but the weights in hf/config.json are a gpt model' run9 -- \
  "$cleave" train --init-from hf --set model.type=mlp --set train.out_dir=run9
python3 -c "
import json; c = json.load(open('llama/config.json')); c['attention_bias'] = True; json.dump(c, open('llama/config.json', 'w'))"
refuse "llama attention_bias" "attention_bias is true" out10 -- "$cleave" import llama --out out10
refuse "a run directory" "neither a Hugging Face model directory" run11 -- \
  "$cleave" train --init-from one --set train.out_dir=run11
"$cleave" train --set model.type=mlp --set train.steps=1 --set train.out_dir=mlp > mlp.log 2>&1 || { cat mlp.log; fail "mlp run"; }
refuse_input "export of an mlp" 'model.type "mlp" has no Hugging Face counterpart (' mlp_hf -- \
  "$cleave" export mlp/checkpoints --format hf --out mlp_hf
refuse_input "resume of weights only" "holds weights only" run8 -- \
  "$cleave" train --resume ck --set train.out_dir=run8 --set model.vocab_size=261 --set model.d_model=16 \
  --set model.n_heads=4 --set model.seq_len=12 --set model.d_ff=24
refuse "existing --out" "ck already exists" ck/nothing -- "$cleave" import hf --out ck
refuse "existing export --out" "exported already exists" exported/nothing -- "$cleave" export ck --format hf --out exported

# The imported checkpoint generates (token ids: vocab 261 is not bytes).
ids=$("$cleave" generate ck --prompt "ab" --tokens 5 --temperature 0 2> gen.log) || { cat gen.log; fail "generate"; }
[ "$(echo "$ids" | wc -w)" -eq 7 ] || fail "generate printed '$ids'"
echo "ok   generate from the imported checkpoint: $ids"
