#!/usr/bin/env bash
# `cleave profile` under mpiexec -n 2: writes a profile with block tables at tp 1 and 2, the P2P and
# collective fits and the waits at meetings, saying where it is on stderr (progress lines, not one per measurement into a log); the cores it
# ran on are recorded, and a plan for 4 ranks on a 2-core machine's profile warns and prices the sharing; `cleave plan --profile` ranks plans from it and its best plan trains under mpiexec;
# `cleave simulate --config --profile` reads it. Bad input: an existing --out (left untouched), a tp width
# that does not divide the heads, a micro-batch that does not divide the batch (before any measurement), a profile of another model, a truncated profile: one clear error each.
# `auto` built from the profile (parallel.auto_schedule_profile) trains to one rank's losses.
# Usage: cli_profile.sh CLEAVE SOURCE_DIR MPIEXEC [FLAGS...]
source_dir=$(realpath "$2")
source "$(dirname "$0")/mpi_script_setup.sh" "$(realpath "$1")" "${@:3}"  # cleave, mpiexec, $work entered
fail() { echo "FAIL $*"; exit 1; }
cat > tiny.json << 'JSON'
{
  "model": {"type": "gpt", "vocab_size": 64, "d_model": 32, "n_layers": 4, "n_heads": 4, "seq_len": 16},
  "batch": {"global_batch_size": 8},
  "optimizer": {"type": "adamw", "lr": 0.003},
  "train": {"steps": 3, "seed": 2, "log_interval": 1},
  "data": {"type": "synthetic"}
}
JSON
"${mpiexec[@]}" -n 2 "$cleave" profile tiny.json --out prof.json --repeats 2 --rounds 2 > profile.log 2>&1 \
  || { cat profile.log; fail "cleave profile"; }
grep -q "^p2p  *ranks  2" profile.log || { cat profile.log; fail "no p2p fit printed"; }
grep -q "^load check: control compute moved [0-9.]*% over 5 timings" profile.log || { cat profile.log; fail "no load check line"; }
# Progress on stderr while it works (into a file: the first and last block and at most one line per 10 s).
grep -q "^profile: block 1/[0-9]* (embedding .*, tp 1, micro-batch 1, round 1/2), [0-9]* s, about" profile.log \
  && grep -q "^profile: block \([0-9]*\)/\1 (.*round 2/2), [0-9]*" profile.log \
  && grep -q "^profile: optimizer step (adamw, sgd, sgd with momentum; gradient norm, clip)" profile.log && grep -q "^profile: p2p and collectives over 2 ranks" profile.log \
  && grep -q "^profile: waits at a meeting per second of compute" profile.log \
  || { cat profile.log; fail "no progress lines"; }
[ "$(grep -c '^profile: block' profile.log)" -le 40 ] || fail "progress lines spam the log"
python3 - prof.json << 'PY' || fail "profile contents"
import json, sys
p = json.load(open(sys.argv[1]))
m = p["measured"]
assert p["format"] == "cleave-hardware-profile" and m["ranks"] == 2, p
shapes = {(b["shape"].split()[0], b["tp"]) for b in m["blocks"]}
for kind in ("embedding", "transformer_block", "layernorm", "lm_head", "softmax_cross_entropy"):
    assert (kind, 1) in shapes and (kind, 2) in shapes, (kind, shapes)
assert sorted({b["micro_batch"] for b in m["blocks"]}) == [1, 2, 4, 8]
assert all(b["forward_ms"] > 0 for b in m["blocks"])
for op in ("all_reduce", "reduce_scatter", "all_gather"):
    assert m[op][0]["ranks"] == 2 and m[op][0]["bandwidth_GBps"] > 0, op
assert m["p2p"]["bandwidth_GBps"] > 0
assert m["sync_wait_per_compute"] >= 0 and m["compute_stretch"] >= 0, m  # the waits at meetings, measured
assert m.get("sync_wait_per_meeting_us", 0) >= 0, m  # absent when the fit put nothing per meeting
assert m["count_exchange"]["ranks"] == 2 and m["count_exchange"]["latency_us"] > 0, m  # the exchange itself
assert "ep_exchange" not in m, m  # the expert dispatch's row exchange: timed for models with routed experts only
# Its own load: the control at the start, between the sections and at the end (not judged here: the machine's load).
lc = p["load_check"]
assert [c["at"] for c in lc["controls"]] == ["start", "after the block tables", "after the optimizer",
                                             "after the collectives and waits", "end"], lc
assert all(0 < c["min_ms"] <= c["median_ms"] for c in lc["controls"]) and lc["cores"] >= 1, lc
print(f"ok   profile: {len(m['blocks'])} block measurements, p2p {m['p2p']['latency_us']:.1f} us + "
      f"{m['p2p']['bandwidth_GBps']:.2f} GB/s")
PY
"$cleave" plan tiny.json --world 2 --profile prof.json --top 3 --write best.json > plan.log 2>&1 || { cat plan.log; fail "plan --profile"; }
grep -q "profile: this machine" plan.log || { cat plan.log; fail "plan did not name the measured profile"; }
"${mpiexec[@]}" -n 2 "$cleave" train best.json --set train.out_dir=run > train.log 2>&1 || { cat best.json train.log; fail "the plan from a measured profile does not train"; }
[ "$(wc -l < run/metrics.jsonl)" -eq 3 ] || fail "the written plan did not run 3 steps"
"$cleave" simulate --config best.json --world 2 --profile prof.json --json > sim.json 2> sim.log || { cat sim.log; fail "simulate --config --profile"; }
echo "ok   plan #1 from the profile: $(sed -n 's/^  1  //p' plan.log | tr -s ' ' | cut -c1-80)"

# The profile records the cores it ran on; planned for more ranks than it was taken with, every rank goes on this
# one machine. Made a 2-core machine's profile (2 ranks, a core each), --world 4 puts 4 ranks on 2 cores: the
# shared-core warning and compute priced 2x; the same figures for a 4-core node price no sharing.
python3 - prof.json << 'PY' || fail "profile cores"
import json, sys
p = json.load(open(sys.argv[1]))
assert p["measured_cores"] == p["cores_per_node"] >= 1 and p["measured_ranks_per_node"] == 2, p
# Two ranks pinned to one core for a moment: what sharing a core costs (planner::measure_time_sharing).
t = p["measured"]["time_sharing"]
assert t["ranks_per_core"] == 2 and t["compute_ratio"] > 0 and t["handoff_spin_us"] > 0 and t["method"], t
p["cores_per_node"] = p["measured_cores"] = 2
json.dump(p, open("two_cores_time_shared.json", "w"))
del p["measured"]["time_sharing"]  # the share of the cores alone, below
json.dump(p, open("two_cores.json", "w"))
p["cores_per_node"] = 4
json.dump(p, open("four_cores.json", "w"))
PY
"$cleave" plan tiny.json --world 4 --profile two_cores.json --top 3 --json two.json > two.log 2>&1 || { cat two.log; fail "plan --world 4 on 2 cores"; }
grep -qxF "  cores: 2 per node; the profile's compute was measured with 2 ranks on 2 cores; 4 ranks per node planned (a cpu profile: every rank on the machine it describes): each computes on 0.50 of a core, priced 2.00x the profile's compute" two.log \
  && grep -qE "^warning: tp[0-9] (cp[0-9][a-z0-9]* )?pp[0-9] dp[0-9] puts 4 ranks on a node of 2 cores \(2.0 ranks per core\)" two.log \
  || { cat two.log; fail "no shared-core line or warning from a measured profile"; }
"$cleave" plan tiny.json --world 4 --profile four_cores.json --top 3 --json four.json > four.log 2>&1 || { cat four.log; fail "plan --world 4 on 4 cores"; }
grep -q "ranks on a node" four.log && { cat four.log; fail "4 ranks on 4 cores warned"; }
python3 - two.json four.json << 'PY' || fail "sharing not priced"
import json, sys
# Every plan, context parallelism included (a second of compute hides one transfer: the ring's hops, ZeRO-3's
# prefetch and per-micro-batch reductions no longer hide under the same compute twice, which priced some cp plans
# at 0.87x their 4-core twin; CoreSharing.SharedCoresNeverPriceAPlanBelowItsTwinOnMoreCores).
two, four = ({tuple(p["overrides"]): p["step_s"] for p in json.load(open(f))["plans"]} for f in sys.argv[1:3])
common = set(two) & set(four)
assert common, "no plan in both"
def size(k, key):
    return next((int(o.split("=")[1]) for o in k if o.startswith(f"parallel.{key}=")), 1)
def peers(k):  # the most peers one meeting waits for: a pipeline's neighbour, tp's or cp's group
    return max(size(k, "tensor_model_parallel_size") - 1, size(k, "context_parallel_size") - 1,
               1 if size(k, "pipeline_model_parallel_size") > 1 else 0)
ratios = sorted(two[k] / four[k] for k in common)
flat = sorted(two[k] / four[k] for k in common if peers(k) == 0)
# Compute x2, communication unchanged: between 1 and 2, near 2 where compute dominates (dp and ZeRO alone). A
# pipeline's transfers and tp's and cp's meetings on shared cores also wait for each peer's core holder,
# (1 - 1/rho) x the mean action between meetings / 2 (docs/planner.md, "More ranks than cores"): at rho 2 a quarter
# of an action per peer per meeting, at most a quarter of the compute per peer over a step (a pipeline's fill and
# drain stretch it at most twice), so a plan may go past 2 by half its peers.
assert flat and flat[0] >= 1 - 1e-9 and 1.5 < flat[-1] <= 2.0 + 1e-9, flat
over = [(k, two[k] / four[k]) for k in common if not 1 - 1e-9 <= two[k] / four[k] <= 2.0 + 0.5 * peers(k) + 1e-9]
assert not over, over
print(f"ok   4 ranks on 2 cores: warned, priced {ratios[0]:.2f}-{ratios[-1]:.2f}x the same plans on 4 cores "
      f"({flat[0]:.2f}-{flat[-1]:.2f}x without a pipeline)")
PY
# With the measured time sharing: every plan priced at least as before, and the warning says so.
"$cleave" plan tiny.json --world 4 --profile two_cores_time_shared.json --top 3 --json shared.json > shared.log 2>&1 \
  || { cat shared.log; fail "plan --world 4 on 2 cores, time sharing measured"; }
grep -qE "^warning: .* puts 4 ranks on a node of 2 cores .* priced from the profile's time sharing" shared.log \
  || { cat shared.log; fail "no time-sharing warning"; }
python3 - two.json shared.json << 'PY' || fail "time sharing not priced"
import json, sys
two, shared = ({tuple(p["overrides"]): p["step_s"] for p in json.load(open(f))["plans"]} for f in sys.argv[1:3])
common = set(two) & set(shared)
assert common and all(shared[k] > two[k] for k in common), [(shared[k], two[k]) for k in common]
print(f"ok   time sharing measured: {len(common)} plans priced above the share of the cores alone")
PY

# Mixed precision: the blocks are timed in bf16 (slower than fp32 here: every GEMM converts), the profile says
# so, a bf16 plan reads it and trains, and an fp32 plan refuses it by name.
"${mpiexec[@]}" -n 2 "$cleave" profile tiny.json --out bf16.json --tp 1 --micro-batches 4 --repeats 2 --rounds 2 \
  --warm-caches --set device.precision=bf16 > bf16.log 2>&1 || { cat bf16.log; fail "profile in bf16"; }
python3 - prof.json bf16.json << 'PY' || fail "bf16 profile contents"
import json, sys
fp32, bf16 = (json.load(open(f))["measured"] for f in sys.argv[1:3])
assert fp32["dtype"] == "f32" and bf16["dtype"] == "bf16", (fp32["dtype"], bf16["dtype"])
sources = [json.load(open(f))["source"] for f in sys.argv[1:3]]
assert "cold caches" in sources[0] and "warm caches" in sources[1], sources
assert {(b["tp"], b["micro_batch"]) for b in bf16["blocks"]} == {(1, 4)}
PY
"$cleave" plan tiny.json --world 2 --profile bf16.json --set device.precision=bf16 --set parallel.tensor_model_parallel_size=1 \
  --top 1 --write best_bf16.json > plan_bf16.log 2>&1 || { cat plan_bf16.log; fail "plan --profile in bf16"; }
"${mpiexec[@]}" -n 2 "$cleave" train best_bf16.json --set train.out_dir=run_bf16 > train_bf16.log 2>&1 \
  || { cat best_bf16.json train_bf16.log; fail "the bf16 plan does not train"; }
"$cleave" plan tiny.json --world 2 --profile bf16.json > plan_mixed.log 2>&1; status=$?
[ $status -eq 64 ] || { cat plan_mixed.log; fail "an fp32 plan of a bf16 profile: exit $status, expected 64 (bad input)"; }
grep -q "timed its blocks in bf16 but the config trains in f32" plan_mixed.log || { cat plan_mixed.log; fail "dtype message"; }
echo "ok   bf16 profile: read by a bf16 plan that trains, refused by an fp32 one"

# `auto` built from the measured profile trains to one rank's losses and weights.
"${mpiexec[@]}" -n 2 "$cleave" verify tiny.json --steps 3 --set parallel.pipeline_model_parallel_size=2 \
  --set parallel.schedule=auto --set parallel.auto_schedule_profile=prof.json > verify.log 2>&1 \
  || { cat verify.log; fail "auto from the measured profile does not match one rank"; }
echo "ok   auto schedule from the profile matches one rank"

# Bad input.
"$cleave" train tiny.json --set parallel.auto_schedule_profile=prof.json > key.log 2>&1 && fail "profile key without auto"
grep -q "parallel.auto_schedule_profile.*applies only to parallel.schedule \"auto\"" key.log || { cat key.log; fail "key message"; }
"${mpiexec[@]}" -n 2 "$cleave" train tiny.json --set parallel.pipeline_model_parallel_size=2 --set parallel.schedule=auto \
  --set parallel.auto_schedule_profile="$source_dir/profiles/h100_sxm.json" > shipped.log 2>&1 && fail "a profile without tables drove auto"
grep -q "has no measured costs" shipped.log || { cat shipped.log; fail "shipped-profile message"; }
before=$(md5sum prof.json)
"${mpiexec[@]}" -n 2 "$cleave" profile tiny.json --out prof.json > again.log 2>&1 && fail "profile overwrote its --out"
grep -q "prof.json exists; not overwriting" again.log || { cat again.log; fail "no overwrite message"; }
[ "$before" = "$(md5sum prof.json)" ] || fail "prof.json changed"
"$cleave" profile tiny.json --out x.json --tp 3 > tp.log 2>&1 && fail "--tp 3 accepted"
grep -q "\-\-tp 3 does not divide n_heads 4" tp.log || { cat tp.log; fail "tp message"; }
[ ! -e x.json ] || fail "a refused profile wrote its file"
# A micro-batch that does not divide the global batch: no plan runs it (train refuses it), so it is bad input (exit 64)
# before anything is measured (it was timed for minutes without a word), on one rank and on every rank alike.
"$cleave" profile tiny.json --out x.json --micro-batches 3,4,6 > micro.log 2>&1; status=$?
[ $status -eq 64 ] || { cat micro.log; fail "--micro-batches 3,4,6 of a global batch of 8: exit $status, expected 64"; }
grep -q "^error: profile: --micro-batches 3, 6 do not divide the global batch 8 (batch.global_batch_size).*nothing was measured. Give divisors of 8 (up to 32: 1, 2, 4, 8" micro.log \
  || { cat micro.log; fail "micro-batch message"; }
! grep -q "GEMM and memory rates\|^profile: tiny.json on" micro.log || { cat micro.log; fail "--micro-batches refused after work"; }
[ ! -e x.json ] || fail "a refused profile wrote its file"
"${mpiexec[@]}" -n 2 "$cleave" profile tiny.json --out x.json --micro-batches 5 > micro2.log 2>&1; status=$?
[ $status -eq 64 ] && [ "$(grep -c 'error: ' micro2.log)" = 1 ] && grep -q "\-\-micro-batches 5 does not divide the global batch 8" micro2.log \
  || { cat micro2.log; fail "--micro-batches 5 on 2 ranks: exit $status, expected 64 printed once"; }
[ ! -e x.json ] || fail "a refused profile wrote its file"
"$cleave" profile tiny.json --out x.json --rounds 0 > rounds.log 2>&1 && fail "--rounds 0 accepted"
grep -q "\-\-rounds expects a whole number >= 1, got '0'" rounds.log || { cat rounds.log; fail "rounds message"; }
[ ! -e x.json ] || fail "a refused profile wrote its file"
"$cleave" plan tiny.json --world 2 --profile prof.json --set model.d_model=64 > other.log 2>&1; status=$?
[ $status -eq 64 ] || { cat other.log; fail "another model's profile: exit $status, expected 64 (bad input)"; }
grep -q "was measured for another model" other.log || { cat other.log; fail "mismatch message"; }
"$cleave" simulate --config tiny.json --world 2 --profile prof.json --set model.d_model=64 > other_sim.log 2>&1; status=$?
[ $status -eq 64 ] && grep -q "was measured for another model" other_sim.log \
  || { cat other_sim.log; fail "simulate --config with another model's profile: exit $status, expected 64"; }
head -c 200 prof.json > cut.json
"$cleave" plan tiny.json --world 2 --profile cut.json > cut.log 2>&1 && fail "truncated profile accepted"
grep -q "profile cut.json: not valid JSON" cut.log || { cat cut.log; fail "truncated message"; }
echo "ok   bad input: existing --out kept, --tp 3, --micro-batches that do not divide the batch, another model, truncated file"
