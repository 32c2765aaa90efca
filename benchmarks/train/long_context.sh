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
# ROUNDS > 1 trains the four layouts ROUNDS times, interleaved (round 1: cp2 ring, cp2 all_to_all, cp4 ring, cp4
# all_to_all; round 2: the same again ...); the measured step is the median of the rounds' medians, with their range.
# BEFORE (another build's directory) adds that build's `simulate` prediction from the same profile, for a before /
# after comparison of the planner on the same measurements.
#
#   benchmarks/train/long_context.sh BUILD [STEPS=4] [CAP=64MiB] [SEQ=8192] [ROUNDS=1] [BEFORE]
set -euo pipefail
build=${1:?usage: $0 BUILD [STEPS] [CAP] [SEQ] [ROUNDS] [BEFORE]}
steps=${2:-4}
cap=${3:-64MiB}
seq=${4:-8192}
rounds=${5:-1}
before=${6:-}
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

# 3. Each layout: predicted (by this build, and by BEFORE's), then trained ROUNDS times, interleaved.
layouts=(2:ring 2:all_to_all 4:ring 4:all_to_all)
for layout in "${layouts[@]}"; do
  cp=${layout%%:*} comm=${layout#*:}
  sets=(--set parallel.context_parallel_size="$cp" --set parallel.context_parallel_comm="$comm")
  name="cp${cp}_$comm"
  for which in after before; do
    bin="$cleave"
    if [ "$which" = before ]; then [ -n "$before" ] || continue; bin="$before/bin/cleave"; fi
    "$bin" simulate --config "$work/long.json" --world "$cp" --profile "$work/profile.json" "${sets[@]}" --json \
      > "$work/$name.sim.$which.json" 2> "$work/$name.sim.err" ||
      { cat "$work/$name.sim.err"; head -c 2000 "$work/$name.sim.$which.json"; exit 1; }
  done
done
for round in $(seq 1 "$rounds"); do
  for layout in "${layouts[@]}"; do
    cp=${layout%%:*} comm=${layout#*:}
    sets=(--set parallel.context_parallel_size="$cp" --set parallel.context_parallel_comm="$comm")
    name="cp${cp}_$comm"
    mpiexec -n "$cp" --oversubscribe "$cleave" train "$work/long.json" "${sets[@]}" --set train.out_dir="$work/$name.r$round" \
      < /dev/null > "$work/$name.r$round.log" 2>&1 || { tail -20 "$work/$name.r$round.log"; exit 1; }
  done
done
printf "\n%-16s %5s %9s %9s %9s %6s %6s | %9s %9s %9s %9s %6s %6s %6s | %9s %9s %6s\n" layout ranks "before ms" "pred ms" \
  "meas ms" "m/bef" "m/pred" "plan MiB" "train MiB" "tl MiB" "peak MiB" "/plan" "/train" "/tl" "act plan" "act peak" ratio
for layout in "${layouts[@]}"; do
  cp=${layout%%:*} comm=${layout#*:}
  name="cp${cp}_$comm"
  [ "$cp" -le "$cores" ] || echo "($name: $cp ranks on $cores cores: oversubscribed, the measured time includes waiting for a core)"
  python3 - "$work" "$name" "$cp" "$rounds" << 'PY'
import json, os, statistics, sys
work, name, ranks, rounds = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
sim = json.load(open(f"{work}/{name}.sim.after.json"))
before_path = f"{work}/{name}.sim.before.json"
before_ms = json.load(open(before_path))["step_s"] * 1e3 if os.path.exists(before_path) else float("nan")
def round_rows(r):
    return [json.loads(l) for l in open(f"{work}/{name}.r{r}/metrics.jsonl")]
def median_step(rows):
    return statistics.median(x["step_ms"] for x in rows[1:]) if len(rows) > 1 else rows[0]["step_ms"]
all_rows = [round_rows(r) for r in range(1, rounds + 1)]
medians = [median_step(rows) for rows in all_rows]
rows = all_rows[0]
run = json.load(open(f"{work}/{name}.r1/run.json"))
pred_ms = sim["step_s"] * 1e3
meas_ms = statistics.median(medians)
plan = sim["ranks"][0]["memory_plan"]
plan_total, plan_act = sim["ranks"][0]["memory_plan_total"], plan["activations"]
timeline = sim["ranks"][0]["timeline_peak_bytes"]
train_total = max(r["estimate_total_bytes"] for r in run["ranks"])
act = run["categories"].index("activations")
peak = max(r["peak_total"] for r in run["ranks"])
peak_act = max(r["peak_bytes"][act] for r in run["ranks"])
mib = lambda b: b / 2**20
print(f"{name:<16} {ranks:5d} {before_ms:9.1f} {pred_ms:9.1f} {meas_ms:9.1f} {meas_ms / before_ms:6.2f} {meas_ms / pred_ms:6.2f} | "
      f"{mib(plan_total):9.2f} {mib(train_total):9.2f} {mib(timeline):9.2f} {mib(peak):9.2f} {peak / plan_total:6.3f} "
      f"{peak / train_total:6.3f} {peak / timeline:6.3f} | {mib(plan_act):9.2f} {mib(peak_act):9.2f} {peak_act / plan_act:6.3f}")
print(f"{'':16} rounds' median step ms: " + " ".join(f"{m:.1f}" for m in medians) +
      f" (range {min(medians) / pred_ms:.2f}-{max(medians) / pred_ms:.2f} of the prediction)")
terms = sim.get("breakdown_s", {})
if terms:
    print(f"{'':16} predicted terms (ms): " + ", ".join(f"{k} {v * 1e3:.1f}" for k, v in terms.items() if isinstance(v, (int, float)) and abs(v) > 5e-5))
print(f"{'':16} bytes: planner {plan_total}, trainer {train_total}, timeline {timeline}, measured {peak} "
      f"(planner {plan_total - peak:+d}, trainer {train_total - peak:+d}, timeline {timeline - peak:+d})")
cats = run["categories"]
for r in run["ranks"][:1]:
    print(f"{'':16} rank 0 by category, measured / trainer's plan (MiB): " + ", ".join(
        f"{c} {mib(m):.3f}/{mib(e):.3f}" for c, m, e in zip(cats, r["peak_bytes"], r["estimate_bytes"]) if m or e))
ranks_mib = " ".join(f"{mib(r['peak_total']):.2f}" for r in run["ranks"])
steps_ms = " | ".join(" ".join(f"{r['step_ms']:.0f}" for r in rr) for rr in all_rows)
losses = " ".join(f"{r['loss']:.4f}" for r in rows)
print(f"{'':16} per-rank peak MiB {ranks_mib}; step ms by round {steps_ms}; losses {losses}")
PY
done
