#!/usr/bin/env bash
# `cleave profile` on a tiny moe config under mpiexec -n 2 trains it for 3 steps at ep 2 and records the routing
# imbalance (the busiest ep rank's routed rows over the mean, > 1 for any routing that is not exactly even) with its
# ep, steps and source; `cleave plan` and `cleave simulate --config` on that profile price ep2 plans at that figure and
# say so, ep4 plans (world 4) at the uniform-routing formula, and --ep-imbalance still overrides it.
# Every plan is shown (--top 100000): which layouts rank first depends on the machine the profile measured, and the
# "ep imbalance:" lines name the eps of the shown plans.
# Usage: profile_ep_imbalance.sh CLEAVE MPIEXEC [FLAGS...]
source "$(dirname "$0")/mpi_script_setup.sh" "$(realpath "$1")" "${@:2}"  # cleave, mpiexec, $work entered
fail() { echo "FAIL $*"; exit 1; }
cat > moe.json << 'JSON'
{
  "model": {"type": "moe", "vocab_size": 64, "d_model": 32, "n_layers": 2, "n_heads": 4, "seq_len": 16,
            "ffn_hidden_size": 32, "n_experts": 4, "top_k": 2},
  "batch": {"global_batch_size": 8, "micro_batch_size": 2},
  "optimizer": {"type": "adamw", "lr": 0.003},
  "train": {"steps": 3, "seed": 5},
  "data": {"type": "synthetic"}
}
JSON
"${mpiexec[@]}" -n 2 "$cleave" profile moe.json --out prof.json --tp 1 --micro-batches 2 --repeats 1 --rounds 1 \
  --ep-imbalance-steps 3 > profile.log 2>&1 || { cat profile.log; fail "cleave profile"; }
grep -q "^profile: the routing imbalance: 3 steps of the config's training at ep 2" profile.log \
  || { cat profile.log; fail "no progress line for the routing imbalance"; }
grep -q "^routing imbalance at ep2: the busiest ep rank's routed rows [0-9.]*x the mean (3 steps" profile.log \
  || { cat profile.log; fail "the routing imbalance not printed"; }
figure=$(python3 - prof.json << 'PY'
import json, sys
r = json.load(open(sys.argv[1]))["routing_imbalance"]
assert r["ep"] == 2 and r["steps"] == 3 and r["micro_batch"] == 2 and len(r["per_step"]) == 3, r
assert all(f > 1 for f in r["per_step"]) and r["busiest_over_mean"] > 1, r
assert abs(r["busiest_over_mean"] - sum(r["per_step"]) / 3) < 1e-6, r
assert "cleave profile moe.json" in r["source"] and "ep = dp = 2" in r["source"], r
print(r["busiest_over_mean"])
PY
) || { cat profile.log; fail "the profile's routing_imbalance"; }
echo "ok   profile: routing imbalance $figure at ep2"

# cleave plan: ep2 plans at the profile's figure, said so in the text and the JSON; ep1 plans without one.
"$cleave" plan moe.json --world 2 --profile prof.json --top 100000 --json plans.json > plan.log 2>&1 \
  || { cat plan.log; fail "plan --profile"; }
grep -q "^ep imbalance: ep2 plans priced at [0-9.]*x the mean rows on the busiest ep rank: measured by cleave profile: ep2, 3 steps of the config's training at micro-batch 2" plan.log \
  || { cat plan.log; fail "plan does not say it used the profile's figure"; }
python3 - plans.json "$figure" << 'PY' || fail "plan --json's ep imbalance"
import json, sys
plans, figure = json.load(open(sys.argv[1]))["plans"], float(sys.argv[2])
ep2 = [p for p in plans if p["expert_parallel"] == 2]
assert ep2 and all(abs(p["ep_imbalance"] - figure) < 1e-9 and p["ep_imbalance_source"] == "profile" for p in ep2), ep2
assert all(p["ep_imbalance_source"] == "none" for p in plans if p["expert_parallel"] == 1), plans
print(f"ok   plan: {len(ep2)} ep2 plans at the profile's {figure:.4f}")
PY
# At world 4 the ep4 plans have no measured figure: the formula, said so; the option overrides the profile's.
"$cleave" plan moe.json --world 4 --profile prof.json --top 100000 --json plans4.json > plan4.log 2>&1 \
  || { cat plan4.log; fail "plan --world 4"; }
python3 - plans4.json "$figure" << 'PY' || { cat plan4.log; fail "plan --world 4's ep imbalance"; }
import json, sys
plans, figure = json.load(open(sys.argv[1]))["plans"], float(sys.argv[2])
ep4 = [p for p in plans if p["expert_parallel"] == 4]
# the formula depends on the tokens per micro-batch, so it is not compared with the measured figure
assert ep4 and all(p["ep_imbalance_source"] == "workload" for p in ep4), [p["layout"] for p in ep4][:5]
assert all(p["ep_imbalance_source"] == "profile" for p in plans if p["expert_parallel"] == 2), "an ep2 plan not from the profile"
PY
grep -q "^ep imbalance: ep4 plans priced at [0-9.]*x .*: the formula for uniformly random top-k routing (the profile measured ep2 only)" plan4.log \
  || { cat plan4.log; fail "plan does not say ep4 used the formula"; }
"$cleave" simulate --config moe.json --world 2 --profile prof.json --set parallel.data_parallel_size=2 \
  --set parallel.expert_model_parallel_size=2 --json > sim.json 2> sim.log || { cat sim.log; fail "simulate --config"; }
"$cleave" simulate --config moe.json --world 2 --profile prof.json --set parallel.data_parallel_size=2 \
  --set parallel.expert_model_parallel_size=2 --ep-imbalance 1.05 --json > sim_option.json 2> sim_option.log \
  || { cat sim_option.log; fail "simulate --config --ep-imbalance"; }
python3 - sim.json sim_option.json "$figure" << 'PY' || fail "simulate --config's ep imbalance"
import json, sys
measured, option, figure = json.load(open(sys.argv[1])), json.load(open(sys.argv[2])), float(sys.argv[3])
assert measured["ep_imbalance_source"] == "profile" and abs(measured["ep_imbalance"] - figure) < 1e-9, measured
assert option["ep_imbalance_source"] == "option" and option["ep_imbalance"] == 1.05, option
PY
echo "PASS: the profile's routing imbalance $figure prices ep2 plans, the formula ep4, the option overrides"
