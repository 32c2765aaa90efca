#!/usr/bin/env bash
# Step time and activation memory of sequence parallelism against plain tp2 (not a timed test): the d256 x
# 4-layer GPT (T 64, vocab 256, global batch 16, micro-batch 4, deterministic) trained at tp2 under
# `mpirun -np 2`, runs with and without parallel.sequence_parallel interleaved (off on off on ...) so drift on a
# shared machine hits both alike. Each run's figure is its median step_ms after 5 warm-up steps; the table gives
# the median over rounds and the ratio on / off (below 1: sequence parallelism faster), then the measured
# activation peak of tp rank 0 (run.json, the allocator's kActivations peak) and the memory plan's. The first
# losses of the two modes are compared first (the forward is plain tp's bit for bit, so they should be equal).
#
#   benchmarks/train/sequence_parallel.sh BUILD [ROUNDS=5] [STEPS=25] [MICRO=4]
set -euo pipefail
build=${1:?usage: $0 BUILD [ROUNDS] [STEPS] [MICRO]}
rounds=${2:-5}
steps=${3:-25}
micro=${4:-4}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export OMP_WAIT_POLICY=passive OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
model=(--set model.type=gpt --set model.vocab_size=256 --set model.d_model=256 --set model.n_layers=4
       --set model.n_heads=4 --set model.seq_len=64 --set data.type=synthetic --set data.path= --set batch.global_batch_size=16
       --set batch.micro_batch_size="$micro" --set parallel.tensor_model_parallel_size=2
       --set train.steps="$steps" --set train.eval_batches=0 --set train.log_interval=1000 --set train.report=true
       --set checkpoint.save_final=false --set train.deterministic=true)
run() {  # sequence_parallel out_dir
  mpirun -np 2 --oversubscribe --mca btl self,vader "$build/bin/cleave" train "${model[@]}" \
    --set parallel.sequence_parallel="$1" --set train.out_dir="$2" >/dev/null 2>&1
}
field() {  # metrics.jsonl: median step_ms after warm-up, or the first 3 losses
  python3 - "$@" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
if sys.argv[2] == "losses":
    print(" ".join(f"{r['loss']:.9g}" for r in rows[:3]))
else:
    print(f"{statistics.median(r[sys.argv[2]] for r in rows[5:]):.2f}")
PY
}
activations() {  # run.json: tp rank 0's measured activation peak and the memory plan's estimate, in MiB
  python3 - "$1" <<'PY'
import json, sys
run = json.load(open(sys.argv[1]))
i = run["categories"].index("activations")
r = run["ranks"][0]
print(f"activations measured {r['peak_bytes'][i] / 2**20:.2f} MiB, planned {r['estimate_bytes'][i] / 2**20:.2f} MiB")
PY
}
off=() on=()
for ((i = 0; i < rounds; ++i)); do
  run false "$work/off-$i"; off+=("$(field "$work/off-$i/metrics.jsonl" step_ms)")
  run true "$work/on-$i"; on+=("$(field "$work/on-$i/metrics.jsonl" step_ms)")
done
lo=$(field "$work/off-0/metrics.jsonl" losses); ln=$(field "$work/on-0/metrics.jsonl" losses)
[[ $lo == "$ln" ]] || echo "first losses differ: off $lo | on $ln"
echo "first losses: $lo"
python3 - "${off[*]}" "${on[*]}" <<'PY'
import statistics, sys
a = [float(x) for x in sys.argv[1].split()]; b = [float(x) for x in sys.argv[2].split()]
ma, mb = statistics.median(a), statistics.median(b)
print(f"{'tp2 step ms':<12} off {ma:8.2f}  on {mb:8.2f}  on/off {mb / ma:6.3f}   per-round off {' '.join(f'{x:.1f}' for x in a)} | on {' '.join(f'{x:.1f}' for x in b)}")
PY
echo "off: $(activations "$work/off-0/run.json")"
echo "on:  $(activations "$work/on-0/run.json")"
