#!/usr/bin/env bash
# Long context under a memory cap (issue 34 part 5; not a timed test): a GPT whose 8,192-token sequence does not
# fit one rank under device.memory_limit trains at context parallelism 2 and 4, ring and all_to_all, and every
# layout's per-rank peak memory and step time are printed next to the planner's prediction for it.
#
#   1. cp1 (one rank) is refused by the memory check before anything is built: its error line is printed and
#      the run must fail (the script stops otherwise).
#   2. `mpiexec -n 2 cleave profile` measures this machine for the model (the planner's block times, link fits).
#   3. For each of cp2 ring, cp2 all_to_all, cp4 ring, cp4 all_to_all: `cleave simulate --config` with that
#      profile gives the predicted step time and the memory plan (per pp rank: all cp ranks of a stage share it;
#      the peak of its memory timeline), then the layout trains STEPS steps under mpiexec; the measured step time
#      is the median step_ms of the steps after the first, the measured peak the allocator's whole peak, max over
#      the ranks (run.json peak_total), against three figures: the planner's memory plan total (simulate's
#      memory_plan_total, what `cleave plan` checks against a cap), the trainer's (run.json estimate_total_bytes,
#      what `cleave train` checks before it builds anything; it knows the run's CPU kernel threads) and the peak of
#      the planner's memory timeline (timeline_peak_bytes); then rank 0's categories, measured against the trainer's
#      plan.
# cp4 runs 4 ranks on the machine's cores: on 2 cores it is oversubscribed (the script says so), so its step
# time measures 4 ranks sharing 2 cores, which the profile (taken with 2 ranks) prices as core sharing.
#
#   benchmarks/train/long_context.sh BUILD [STEPS=4] [CAP=64MiB] [SEQ=8192]
set -euo pipefail
build=${1:?usage: $0 BUILD [STEPS] [CAP] [SEQ]}
steps=${2:-4}
cap=${3:-64MiB}
seq=${4:-8192}
cleave="$build/bin/cleave"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export OMP_WAIT_POLICY=passive OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_btl_vader_single_copy_mechanism=none
cat > "$work/long.json" << JSON
{
  "model": {"type": "gpt", "vocab_size": 256, "d_model": 64, "n_layers": 2, "n_heads": 4, "seq_len": $seq},
  "batch": {"global_batch_size": 1, "micro_batch_size": 1},
  "optimizer": {"type": "adamw", "lr": 0.001},
  "train": {"seed": 1, "steps": $steps, "eval_batches": 0, "log_interval": 1000, "report": true,
            "deterministic": true},
  "checkpoint": {"save_final": false},
  "data": {"type": "synthetic"},
  "device": {"type": "cpu", "memory_limit": "$cap"}
}
JSON
cores=$(nproc)
echo "model: gpt d64 x 2 layers, 4 heads, vocab 256, seq_len $seq, micro-batch 1; device.memory_limit $cap; $steps steps"
echo "machine: $(lscpu | sed -n 's/^Model name: *//p'), $cores cores"

# 1. One rank: refused by the memory check.
if "$cleave" train "$work/long.json" --set train.out_dir="$work/cp1" > "$work/cp1.log" 2>&1; then
  echo "cp1 trained under the cap: the cap does not force context parallelism; lower CAP"; exit 1
fi
echo "cp1 refused: $(grep -m1 -E '^error: memory' "$work/cp1.log")"

# 2. The planner's profile of this machine (2 ranks computing at once, as the cp2 runs do).
mpiexec -n 2 --oversubscribe "$cleave" profile "$work/long.json" --set parallel.context_parallel_size=2 \
  --out "$work/profile.json" --repeats 2 --rounds 2 < /dev/null > "$work/profile.log" 2>&1 ||
  { cat "$work/profile.log"; exit 1; }

# 3. Each layout: predicted, then measured.
printf "\n%-16s %5s %9s %9s %6s | %9s %9s %9s %9s %6s %6s %6s | %9s %9s %6s\n" layout ranks "pred ms" "meas ms" ratio \
  "plan MiB" "train MiB" "tl MiB" "peak MiB" "/plan" "/train" "/tl" "act plan" "act peak" ratio
for cp in 2 4; do
  for comm in ring all_to_all; do
    sets=(--set parallel.context_parallel_size="$cp" --set parallel.context_parallel_comm="$comm")
    name="cp${cp}_$comm"
    [ "$cp" -le "$cores" ] || echo "($name: $cp ranks on $cores cores: oversubscribed, the measured time includes waiting for a core)"
    "$cleave" simulate --config "$work/long.json" --world "$cp" --profile "$work/profile.json" "${sets[@]}" --json \
      > "$work/$name.sim.json" 2> "$work/$name.sim.err" || { cat "$work/$name.sim.err"; head -c 2000 "$work/$name.sim.json"; exit 1; }
    mpiexec -n "$cp" --oversubscribe "$cleave" train "$work/long.json" "${sets[@]}" --set train.out_dir="$work/$name" \
      < /dev/null > "$work/$name.log" 2>&1 || { tail -20 "$work/$name.log"; exit 1; }
    python3 - "$work/$name.sim.json" "$work/$name/metrics.jsonl" "$work/$name/run.json" "$name" "$cp" << 'PY'
import json, statistics, sys
sim = json.load(open(sys.argv[1]))
rows = [json.loads(l) for l in open(sys.argv[2])]
run = json.load(open(sys.argv[3]))
name, ranks = sys.argv[4], int(sys.argv[5])
pred_ms = sim["step_s"] * 1e3
meas_ms = statistics.median(r["step_ms"] for r in rows[1:]) if len(rows) > 1 else rows[0]["step_ms"]
plan = sim["ranks"][0]["memory_plan"]
plan_total, plan_act = sim["ranks"][0]["memory_plan_total"], plan["activations"]
timeline = sim["ranks"][0]["timeline_peak_bytes"]
train_total = max(r["estimate_total_bytes"] for r in run["ranks"])
act = run["categories"].index("activations")
peak = max(r["peak_total"] for r in run["ranks"])
peak_act = max(r["peak_bytes"][act] for r in run["ranks"])
mib = lambda b: b / 2**20
print(f"{name:<16} {ranks:5d} {pred_ms:9.1f} {meas_ms:9.1f} {meas_ms / pred_ms:6.2f} | {mib(plan_total):9.2f} "
      f"{mib(train_total):9.2f} {mib(timeline):9.2f} {mib(peak):9.2f} {peak / plan_total:6.3f} {peak / train_total:6.3f} "
      f"{peak / timeline:6.3f} | {mib(plan_act):9.2f} {mib(peak_act):9.2f} {peak_act / plan_act:6.3f}")
print(f"{'':16} bytes: planner {plan_total}, trainer {train_total}, timeline {timeline}, measured {peak} "
      f"(planner {plan_total - peak:+d}, trainer {train_total - peak:+d}, timeline {timeline - peak:+d})")
cats = run["categories"]
for r in run["ranks"][:1]:
    print(f"{'':16} rank 0 by category, measured / trainer's plan (MiB): " + ", ".join(
        f"{c} {mib(m):.3f}/{mib(e):.3f}" for c, m, e in zip(cats, r["peak_bytes"], r["estimate_bytes"]) if m or e))
ranks_mib = " ".join(f"{mib(r['peak_total']):.2f}" for r in run["ranks"])
steps_ms = " ".join(f"{r['step_ms']:.0f}" for r in rows)
losses = " ".join(f"{r['loss']:.4f}" for r in rows)
print(f"{'':16} per-rank peak MiB {ranks_mib}; step ms {steps_ms}; losses {losses}")
PY
  done
done
