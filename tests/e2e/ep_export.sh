#!/usr/bin/env bash
# Expert parallelism through the CLI (issue 36 part 3): a tiny moe trained 2 steps on 2 ranks at ep 2 and at ep 1
# (deterministic mode) saves its final checkpoint; `cleave export` of each, in Cleave's format and as a Hugging Face
# Mixtral directory, must give byte-identical files (the ep 2 checkpoint holds each rank's experts; export gathers
# them into the logical [E, ...] tensors and the per-expert HF names). The ep 2 run's log names the layout. Then on 4
# ranks ep 2 × tp 2 against tp 2 at ep 1 (HF export gathering expert shards split over both ep and tp).
# Usage: ep_export.sh CLEAVE MPIEXEC [FLAGS...]
source "$(dirname "$0")/mpi_script_setup.sh" "$@"  # cleave, mpiexec, $work (entered, removed on exit)
cat > moe.json <<'JSON'
{
  "model": {"type": "moe", "vocab_size": 64, "d_model": 16, "n_layers": 2, "n_heads": 2, "seq_len": 8,
            "ffn_hidden_size": 12, "n_experts": 4, "top_k": 2},
  "batch": {"global_batch_size": 4, "micro_batch_size": 1},
  "optimizer": {"type": "sgd", "lr": 0.05},
  "train": {"steps": 2, "eval_batches": 0, "deterministic": true},
  "checkpoint": {"save_final": true},
  "data": {"type": "synthetic"}
}
JSON
for ep in 1 2; do
  "${mpiexec[@]}" -n 2 "$cleave" train moe.json --set train.out_dir=run$ep \
      --set parallel.expert_model_parallel_size=$ep > train$ep.log 2>&1 || { cat train$ep.log; echo "FAIL train ep$ep"; exit 1; }
  "$cleave" export run$ep/checkpoints --out cleave$ep.safetensors --format cleave > export$ep.log 2>&1 &&
    "$cleave" export run$ep/checkpoints --out hf$ep --format hf >> export$ep.log 2>&1 ||
    { cat export$ep.log; echo "FAIL export ep$ep"; exit 1; }
done
grep -q 'tp=1 dp=2 ep=2 pp=1 (world 2)' train2.log || { cat train2.log; echo "FAIL the ep 2 run does not name its layout"; exit 1; }
cmp cleave1.safetensors cleave2.safetensors || { echo "FAIL cleave export differs between ep 1 and ep 2"; exit 1; }
cmp hf1/model.safetensors hf2/model.safetensors || { echo "FAIL hf export differs between ep 1 and ep 2"; exit 1; }
echo "ok   ep 2 checkpoint exports byte-identical to ep 1 ($(stat -c %s hf2/model.safetensors) bytes of Mixtral weights)"
# ep 2 × tp 2 on 4 ranks (each rank a quarter of every expert tensor: its ep rank's experts, their F split over tp)
# against tp 2 at ep 1: the same arithmetic, so the exports must be byte-identical too.
for ep in 1 2; do
  "${mpiexec[@]}" -n 4 "$cleave" train moe.json --set train.out_dir=tp_run$ep --set parallel.tensor_model_parallel_size=2 \
      --set parallel.expert_model_parallel_size=$ep > tp_train$ep.log 2>&1 || { cat tp_train$ep.log; echo "FAIL train tp2 ep$ep"; exit 1; }
  "$cleave" export tp_run$ep/checkpoints --out tp_hf$ep --format hf > tp_export$ep.log 2>&1 ||
    { cat tp_export$ep.log; echo "FAIL export tp2 ep$ep"; exit 1; }
done
grep -q 'tp=2 dp=2 ep=2 pp=1 (world 4)' tp_train2.log || { cat tp_train2.log; echo "FAIL the ep 2 × tp 2 run does not name its layout"; exit 1; }
cmp tp_hf1/model.safetensors tp_hf2/model.safetensors || { echo "FAIL hf export differs between tp 2 at ep 1 and ep 2 × tp 2"; exit 1; }
echo "ok   ep 2 × tp 2 checkpoint exports byte-identical to tp 2 at ep 1"
# ZeRO-3 at ep 2 (each rank keeps shards of its experts over its expert-dp group; the checkpoint holds segments of
# them): the export gathers the same logical tensors, byte-identical to ep 1's.
"${mpiexec[@]}" -n 2 "$cleave" train moe.json --set train.out_dir=run2z3 --set parallel.expert_model_parallel_size=2 \
    --set optimizer.zero_stage=3 > train2z3.log 2>&1 || { cat train2z3.log; echo "FAIL train ep2 zero3"; exit 1; }
"$cleave" export run2z3/checkpoints --out hf2z3 --format hf > export2z3.log 2>&1 ||
  { cat export2z3.log; echo "FAIL export ep2 zero3"; exit 1; }
cmp hf1/model.safetensors hf2z3/model.safetensors || { echo "FAIL hf export differs between ep 1 and ep 2 ZeRO-3"; exit 1; }
echo "ok   ep 2 ZeRO-3 checkpoint exports byte-identical to ep 1"
