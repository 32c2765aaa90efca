#!/usr/bin/env bash
# `cleave plan`: the search on 2 ranks under a memory cap prints a ranked table whose plans are all under the
# cap; --write saves plan #1 as a config that `mpiexec -n 2 cleave train` runs unchanged (into a fresh out_dir
# named after the plan file, while the source config's directory holds a run; also a plan at cp 1 written from a
# source config at cp 2: its --set lines set cp and ep whatever their value) (and the measured
# peak is reported next to the plan's estimate); --explain prints plan #1's step term by term (the term rows sum
# to the total row, which is #1's predicted step) and where runner-ups lose time, per term. Bad input:
# a world no layout fits (exit 64, the most frequent reasons counted), a world larger than any layout can use (refused before the search; and --world 1024
# answers within a minute), a cap no plan meets (smallest need per category and the closest plan; the same with
# the cap from the config), an
# unreadable or malformed profile, --write onto an existing file, a --trial setting without --trial and
# --ep-imbalance on a model without experts: one clear error each, nothing written.
# Plans predicted within 5% of each other are shown as tied, the lowest share of the cap first. Ranks sharing
# cores are priced by their share and warned about; --trial 2 trains the top two plans under the launcher in
# interleaved rounds and prints predicted against measured (median, spread, rounds; a run that fails is named by its
# error line; a --set data.path stays relative to the working directory), re-ranking only where one
# plan's range clears the other's, with a progress line per run; a spent budget stops after one round; with
# --explain the trial prints each plan's traced step against its prediction row by row, naming the largest
# disagreement (and writes the rows in --json); a tp2 and a cp2 run's traced compute spans carry their waits on
# collectives, which --explain shows as rows of their own. A plan on a GPU shows its page-locked host memory per rank
# (the memory plan's host line: staged micro-batches, the losses row, a moe model's routing staging) in the table
# and --json; a plan on this machine's (CPU) profile does not.
# The table's columns line up at any layout length (the moe example's cp4 and ep2 layouts on 4 ranks).
# Usage: cli_plan.sh CLEAVE SOURCE_DIR MPIEXEC [FLAGS...]
source_dir=$(realpath "$2")
source "$(dirname "$0")/mpi_script_setup.sh" "$(realpath "$1")" "${@:3}"  # cleave, mpiexec, $work entered
fail() { echo "FAIL $*"; exit 1; }
cat > tiny.json << 'JSON'
{
  "model": {"type": "gpt", "vocab_size": 64, "d_model": 32, "n_layers": 4, "n_heads": 4, "seq_len": 16},
  "batch": {"global_batch_size": 8},
  "optimizer": {"type": "adamw", "lr": 0.003},
  "train": {"steps": 4, "seed": 2, "log_interval": 1, "eval_batches": 1, "out_dir": "runs/tiny"},
  "data": {"type": "synthetic"}
}
JSON
"$cleave" plan tiny.json --world 2 --memory-limit 1MiB --top 5 --explain --write best.json > plan.log 2>&1 \
  || { cat plan.log; fail "cleave plan"; }
grep -q "^  1  tp" plan.log || { cat plan.log; fail "no ranked table"; }
grep -q "where the runner-ups lose time" plan.log || { cat plan.log; fail "no --explain"; }
python3 - plan.log << 'PY' || { cat plan.log; fail "--explain's terms do not sum to plan #1's step"; }
import re, sys
lines = open(sys.argv[1]).read().split("\n")
step_ms = float(next(l for l in lines if re.match(r"^\s+1\s+tp\d", l)).split()[10])
start = lines.index(next(l for l in lines if l.startswith("plan #1's predicted step, term by term")))
terms = {"forward", "input_grad", "weight_grad", "recompute", "tensor_parallel", "context_parallel", "expert_all_to_all", "zero_gather",
         "data_parallel", "optimizer", "point_to_point", "bubble"}
rows, total, blocks = {}, None, 0
for l in lines[start + 2:]:
    if not l.startswith("  "):
        break
    name = l.split()[0]
    if l.startswith("    "):
        blocks += 1
    elif name in terms:
        rows[name] = float(l.split()[1])
    elif name == "total":
        total = float(l.split()[1])
assert {"forward", "input_grad", "weight_grad"} <= set(rows) and blocks >= 3, (rows, blocks)
assert total is not None and abs(total - step_ms) <= 0.01, (total, step_ms)
assert abs(sum(rows.values()) - total) <= 0.001 * len(rows) + 1e-9, (rows, total)
runner = [l for l in lines if re.match(r"^\s+2  [+-]\d+\.\d\d ms: ", l)]
assert runner, "no per-term line for runner-up #2"
print(f"ok   --explain: {len(rows)} terms, {blocks} block rows, sum {sum(rows.values()):.3f} = total {total:.3f} ms = #1's step")
PY
grep -q "^plans predicted within 5.0% of their group's fastest are tied" plan.log || { cat plan.log; fail "no tie rule stated"; }
python3 - plan.log << 'PY' || { cat plan.log; fail "a ranked plan is over the 1 MiB cap or the order breaks the tie rule"; }
import re, sys
rows = [l for l in open(sys.argv[1]) if re.match(r"^\s+\d+\s+tp\d", l)]
assert rows, "no rows"
plans = []
for l in rows:
    m = re.search(r"= (\d+)% of cap", l)
    assert m and int(m.group(1)) <= 100, l
    tie = re.search(r"tie #(\d+)-#(\d+)", l)
    plans.append((int(l.split()[0]), float(l.split()[10]), int(m.group(1)), (int(tie.group(1)), int(tie.group(2))) if tie else None))
# Rows in a tie group: within 5% of the group's fastest, in bands of headroom (5 points of the cap from the lowest
# remaining share, faster first inside a band): no row follows one more than 5 points roomier (6 with the printed
# percentages' rounding), and a group inside one band is in time order; a row after a group is beyond 5% of that
# group's fastest (the groups start at the fastest remaining plan).
groups = {}
for row, t, cap, tie in plans:
    groups.setdefault(tie or (row, row), []).append((row, t, cap))
firsts = sorted(groups)
for (a, b), members in groups.items():
    assert [r for r, _, _ in members] == list(range(a, min(b, len(plans)) + 1)), (a, b, members)
    fastest = min(t for _, t, _ in members)
    assert all(t <= fastest * 1.05 + 0.005 for _, t, _ in members), members
    caps = [c for _, _, c in members]
    assert all(caps[j] >= caps[i] - 6 for i in range(len(caps)) for j in range(i + 1, len(caps))), members
    if max(caps) - min(caps) <= 4:
        times = [t for _, t, _ in members]
        assert times == sorted(times), members
for g, h in zip(firsts, firsts[1:]):
    assert min(t for _, t, _ in groups[h]) > min(t for _, t, _ in groups[g]) * 1.05 - 0.005, (groups[g], groups[h])
print(f"ok   {len(plans)} rows, {sum(1 for p in plans if p[3])} in tie groups")
PY
[ -f best.json ] || fail "--write wrote nothing"
# README's flow: the source config has run (its out_dir holds a run), then its plan trains as written, into a
# directory of its own named after the plan file (it used to inherit the source's and be refused).
mkdir -p runs/tiny && echo '{"step": 1}' > runs/tiny/metrics.jsonl
grep -q "wrote plan #1 to best.json (train.out_dir runs/best, a fresh directory; the source config's was runs/tiny)" plan.log \
  || { cat plan.log; fail "--write does not say which out_dir the plan trains into"; }
"${mpiexec[@]}" -n 2 "$cleave" train best.json > train.log 2>&1 || { cat best.json train.log; fail "the written plan does not train"; }
[ "$(wc -l < runs/best/metrics.jsonl)" -eq 4 ] || fail "the written plan did not run 4 steps into runs/best"
[ "$(cat runs/tiny/metrics.jsonl)" = '{"step": 1}' ] || fail "the source's run directory was touched"
echo "ok   plan #1: $(sed -n 's/^  1  //p' plan.log | tr -s ' ' | cut -c1-90)"
echo "     trained: $(grep -o 'peak memory per rank.*' train.log)"

# A source config at cp 2 planned for 3 ranks (no cp2 layout divides 3): plan #1 is at cp 1 and --write must say so;
# the plan's --set lines wrote cp and ep only above 1, so the source's cp 2 stayed and the plan needed 6 ranks.
"$cleave" plan tiny.json --world 3 --top 1 --set parallel.context_parallel_size=2 --write best_cp.json > plan_cp.log 2>&1 \
  || { cat plan_cp.log; fail "cleave plan of a cp2 source"; }
python3 -c "import json,sys; p=json.load(open('best_cp.json'))['parallel']; sys.exit(p['context_parallel_size'] != 1)" \
  || { cat plan_cp.log best_cp.json; fail "--write kept the source's context_parallel_size under a cp1 plan"; }
"${mpiexec[@]}" -n 3 "$cleave" train best_cp.json --set train.steps=1 --set train.eval_batches=0 > train_cp.log 2>&1 \
  || { cat train_cp.log; fail "the plan written from a cp2 source does not train on 3 ranks"; }
echo "ok   plan #1 of a cp2 source on 3 ranks (cp1) written with cp 1; trains on 3 ranks"

# cleave simulate --config: the written plan's own step, memory plan per pp rank and its timeline.
"$cleave" simulate --config best.json --world 2 --json > sim.json 2> sim.log || { cat sim.log sim.json; fail "simulate --config"; }
python3 - sim.json << 'PY' || fail "simulate --config output"
import json, sys
out = json.load(open(sys.argv[1]))
assert out["step_s"] > 0 and 0 <= out["bubble_fraction"] < 1 and out["fits"], out
pp = int(out["layout"].split()[1][2:])
assert len(out["ranks"]) == pp, out["layout"]
for r in out["ranks"]:
    line = r["memory_timeline"]
    assert line[0][0] == 0 and abs(line[-1][0] - out["step_s"]) < 1e-12, "timeline spans the step"
    assert all(a[0] <= b[0] for a, b in zip(line, line[1:])), "time ascends"
    assert max(b for _, b in line) == r["timeline_peak_bytes"]
    # The memory plan's own timeline: it starts at what the plan's total holds beside its activation walk (at least
    # the parameters, gradients and optimizer state) and peaks near the total (below it by the boundary tensors in
    # flight under pipelining, which only the plan's walk places; an overlapped pair's two actions may hold their
    # rises at once on the simulated clock, where the walk takes them in turn).
    state = sum(r["memory_plan"][k] for k in ("parameters", "gradients", "optimizer_state"))
    assert state <= line[0][1] < r["timeline_peak_bytes"] <= 1.02 * r["memory_plan_total"], r
    assert r["memory_plan_total"] <= sum(r["memory_plan"].values()), r
print(f"ok   simulate --config: step {out['step_s'] * 1e3:.2f} ms, peaks {[r['timeline_peak_bytes'] for r in out['ranks']]}")
PY
"$cleave" simulate --config best.json --world 3 > sim3.log 2>&1 && fail "simulate --config on a world the layout does not divide"
grep -q "world size 3\|3 ranks\|world 3" sim3.log || { cat sim3.log; fail "simulate --config world message"; }
# --attention: the kernel a simulated run used. Stored probabilities cost more on a roofline profile; a measured
# profile (this machine) times the engine's own attention and refuses them; an unknown kind is named.
a100="$source_dir/profiles/a100_80gb_sxm.json"
"$cleave" simulate --config best.json --world 2 --profile "$a100" --json > att_me.json || fail "simulate --attention default"
"$cleave" simulate --config best.json --world 2 --profile "$a100" --attention probabilities_dropout --json > att_p.json \
  || fail "simulate --attention probabilities_dropout"
python3 - att_me.json att_p.json << 'PY' || fail "--attention probabilities_dropout is not dearer"
import json, sys
me, p = (json.load(open(f)) for f in sys.argv[1:3])
assert me["attention"] == "memory_efficient" and p["attention"] == "probabilities_dropout", (me["attention"], p["attention"])
assert p["step_s"] > me["step_s"], (p["step_s"], me["step_s"])
print(f"ok   simulate --attention: step {me['step_s'] * 1e6:.1f} us -> {p['step_s'] * 1e6:.1f} us with stored probabilities")
PY
"$cleave" simulate --config best.json --world 2 --attention probabilities > att1.log 2>&1 && fail "--attention on a measured profile"
grep -q "needs a roofline profile" att1.log || { cat att1.log; fail "--attention measured-profile message"; }
"$cleave" simulate --config best.json --world 2 --profile "$a100" --attention flash > att2.log 2>&1 && fail "--attention flash accepted"
grep -q "'flash' is not an attention kind (memory_efficient, probabilities, probabilities_dropout)" att2.log \
  || { cat att2.log; fail "--attention unknown-kind message"; }
# --attention-kernel: a fused kernel family priced per pass from the profile's attention_rates. The A100 profile has
# no cuDNN rates (refused by name); on the H100 profile this tiny model's bf16 heads have no published rate (head dim 8).
"$cleave" simulate --config best.json --world 2 --profile "$a100" --attention-kernel cudnn > ak1.log 2>&1 \
  && fail "--attention-kernel without attention_rates accepted"
grep -q "has no attention_rates for it" ak1.log || { cat ak1.log; fail "--attention-kernel missing-table message"; }
"$cleave" simulate --config best.json --world 2 --profile "$source_dir/profiles/h100_sxm.json" --attention-kernel cudnn \
  --set device.precision=bf16 > ak2.log 2>&1 && fail "--attention-kernel at an unpublished head dim accepted"
grep -q "attention_rates has no curve for kernel 'cudnn' forward" ak2.log || { cat ak2.log; fail "--attention-kernel head-dim message"; }
# At a published head dim (2 heads of 128, T 512, bf16) the kernel's per-pass rates price the attention: echoed, and
# the step moves (here faster: the size curve prices these small products below cuDNN's 315 TFLOP/s at T 512).
h100_set="--set model.d_model=256 --set model.n_heads=2 --set model.seq_len=512 --set device.precision=bf16"
"$cleave" simulate --config tiny.json --world 2 --profile "$source_dir/profiles/h100_sxm.json" $h100_set --json \
  > ak_plain.json 2> ak3.log || { cat ak3.log; fail "simulate on the H100 profile"; }
"$cleave" simulate --config tiny.json --world 2 --profile "$source_dir/profiles/h100_sxm.json" $h100_set \
  --attention-kernel cudnn --json > ak_cudnn.json 2> ak4.log || { cat ak4.log; fail "simulate --attention-kernel cudnn"; }
python3 - ak_plain.json ak_cudnn.json << 'PY' || fail "--attention-kernel cudnn output"
import json, sys
plain, cudnn = (json.load(open(f)) for f in sys.argv[1:3])
assert plain["attention_kernel"] == "" and cudnn["attention_kernel"] == "cudnn", (plain["attention_kernel"], cudnn["attention_kernel"])
assert cudnn["step_s"] != plain["step_s"], (cudnn["step_s"], plain["step_s"])
print(f"ok   simulate --attention-kernel cudnn: step {plain['step_s'] * 1e6:.1f} us -> {cudnn['step_s'] * 1e6:.1f} us")
PY
# An unfused run (--attention probabilities_dropout) naming PyTorch's standard attention on the A100 profile, near
# the benchmark's shape (16 heads of 128, T 2048; 4 sequences a micro-batch, 2 ranks): its scores, softmax and
# products at the published rates (forward 60, backward 86 TFLOP/s), slower than the roofline prices them; at an
# unpublished head dim (the tiny model's 8) refused by name.
a100_set="--set model.d_model=2048 --set model.n_heads=16 --set model.seq_len=2048 --set batch.micro_batch_size=4 --set device.precision=bf16"
"$cleave" simulate --config tiny.json --world 2 --profile "$a100" $a100_set --attention probabilities_dropout --json \
  > un_plain.json 2> un1.log || { cat un1.log; fail "simulate --attention probabilities_dropout"; }
"$cleave" simulate --config tiny.json --world 2 --profile "$a100" $a100_set --attention probabilities_dropout \
  --attention-kernel pytorch --json > un_pytorch.json 2> un2.log || { cat un2.log; fail "simulate --attention-kernel pytorch"; }
python3 - un_plain.json un_pytorch.json << 'PY' || fail "--attention-kernel pytorch output"
import json, sys
plain, torch = (json.load(open(f)) for f in sys.argv[1:3])
assert torch["attention_kernel"] == "pytorch" and torch["attention"] == "probabilities_dropout", torch["attention_kernel"]
assert torch["step_s"] > plain["step_s"], (torch["step_s"], plain["step_s"])
print(f"ok   simulate --attention probabilities_dropout --attention-kernel pytorch: step {plain['step_s'] * 1e6:.1f} us "
      f"-> {torch['step_s'] * 1e6:.1f} us")
PY
"$cleave" simulate --config best.json --world 2 --profile "$a100" --attention probabilities --attention-kernel pytorch \
  --set device.precision=bf16 > un3.log 2>&1 && fail "--attention-kernel pytorch at an unpublished head dim accepted"
grep -q "attention_rates has no curve for kernel 'pytorch'" un3.log || { cat un3.log; fail "--attention-kernel pytorch head-dim message"; }
# --selective-recompute torchtitan_op: torchtitan's per-op policy under train.recompute selective reruns every second
# projection GEMM and the elementwise ops instead of the attention core: echoed, the recompute term moves, and the
# GEMM passes do not; without train.recompute selective it is refused by name.
"$cleave" simulate --config tiny.json --world 2 --profile "$a100" --set train.recompute=selective --json \
  > sel_att.json 2> sel1.log || { cat sel1.log; fail "simulate selective"; }
"$cleave" simulate --config tiny.json --world 2 --profile "$a100" --set train.recompute=selective \
  --selective-recompute torchtitan_op --json > sel_op.json 2> sel2.log || { cat sel2.log; fail "simulate --selective-recompute"; }
python3 - sel_att.json sel_op.json << 'PY' || fail "--selective-recompute torchtitan_op output"
import json, sys
att, op = (json.load(open(f)) for f in sys.argv[1:3])
assert att["selective_recompute"] == "attention" and op["selective_recompute"] == "torchtitan_op", op["selective_recompute"]
a, o = att["breakdown_s"], op["breakdown_s"]
assert o["recompute"] != a["recompute"] and o["recompute"] > 0, (a["recompute"], o["recompute"])
for t in ("forward", "input_grad", "weight_grad"):
    assert abs(o[t] - a[t]) <= 1e-12 * max(1.0, a[t]), (t, a[t], o[t])
print(f"ok   simulate --selective-recompute torchtitan_op: recompute {a['recompute'] * 1e6:.2f} us -> {o['recompute'] * 1e6:.2f} us")
PY
"$cleave" simulate --config tiny.json --world 2 --profile "$a100" --selective-recompute torchtitan_op > sel3.log 2>&1 \
  && fail "--selective-recompute without train.recompute selective accepted"
grep -q "prices train.recompute selective" sel3.log || { cat sel3.log; fail "--selective-recompute message"; }
# --norm torch_unfused (PyTorch's eager RMSNorm for llama's norms): echoed; an unknown kind refused by name.
"$cleave" simulate --config tiny.json --world 2 --profile "$a100" --norm torch_unfused --json > norm.json 2> norm1.log \
  || { cat norm1.log; fail "simulate --norm torch_unfused"; }
grep -q '"norm": "torch_unfused"' norm.json || fail "--norm not echoed"
"$cleave" simulate --config tiny.json --world 2 --profile "$a100" --norm apex > norm2.log 2>&1 && fail "--norm apex accepted"
grep -q "'apex' is not a norm kind (fused, torch_unfused)" norm2.log || { cat norm2.log; fail "--norm message"; }
echo "ok   simulate --norm torch_unfused echoed, --norm apex refused"
# --fsdp2-copy-out (PyTorch FSDP2's all-gather copy-out under ZeRO-3): echoed, the elementwise term grows and the GEMM
# passes do not; without optimizer.zero_stage 3 it is refused by name.
"$cleave" simulate --config tiny.json --world 2 --profile "$a100" --set optimizer.zero_stage=3 --json > z3.json 2> z3a.log \
  || { cat z3a.log; fail "simulate zero 3"; }
"$cleave" simulate --config tiny.json --world 2 --profile "$a100" --set optimizer.zero_stage=3 --fsdp2-copy-out --json \
  > z3copy.json 2> z3b.log || { cat z3b.log; fail "simulate --fsdp2-copy-out"; }
python3 - z3.json z3copy.json << 'PY' || fail "--fsdp2-copy-out output"
import json, sys
plain, copy = (json.load(open(f)) for f in sys.argv[1:3])
assert not plain["fsdp2_copy_out"] and copy["fsdp2_copy_out"], copy["fsdp2_copy_out"]
a, c = plain["breakdown_s"], copy["breakdown_s"]
assert c["elementwise"] > a["elementwise"], (a["elementwise"], c["elementwise"])
for t in ("forward", "input_grad", "weight_grad"):
    assert abs(c[t] - a[t]) <= 1e-12 * max(1.0, a[t]), (t, a[t], c[t])
print(f"ok   simulate --fsdp2-copy-out: elementwise {a['elementwise'] * 1e6:.2f} us -> {c['elementwise'] * 1e6:.2f} us")
PY
"$cleave" simulate --config tiny.json --world 2 --profile "$a100" --fsdp2-copy-out > z3c.log 2>&1 \
  && fail "--fsdp2-copy-out without ZeRO-3 accepted"
grep -q "set optimizer.zero_stage 3, or drop the option" z3c.log || { cat z3c.log; fail "--fsdp2-copy-out message"; }
# --blocking-p2p: Megatron-LM of 2021's point-to-point (batch_isend_irecv, wait, torch.cuda.synchronize) holds each
# rank in its transfers: echoed, never faster; its interleaved schedule with fewer micro-batches than ranks deadlocks,
# refused by name.
pp2="--set parallel.pipeline_model_parallel_size=2 --set parallel.schedule=interleaved_1f1b --set parallel.virtual_pipeline_stages=2"
"$cleave" simulate --config tiny.json --world 2 --profile "$a100" $pp2 --set batch.micro_batch_size=2 --json \
  > p2p_async.json || fail "simulate interleaved pp2"
"$cleave" simulate --config tiny.json --world 2 --profile "$a100" $pp2 --set batch.micro_batch_size=2 --blocking-p2p \
  --json > p2p_blocking.json || fail "simulate --blocking-p2p"
python3 - p2p_async.json p2p_blocking.json << 'PY' || fail "--blocking-p2p output"
import json, sys
a, b = (json.load(open(f)) for f in sys.argv[1:3])
assert a["blocking_p2p"] is False and b["blocking_p2p"] is True, (a["blocking_p2p"], b["blocking_p2p"])
assert b["step_s"] > a["step_s"], (b["step_s"], a["step_s"])
print(f"ok   simulate --blocking-p2p: step {a['step_s'] * 1e6:.1f} us -> {b['step_s'] * 1e6:.1f} us")
PY
"$cleave" simulate --config tiny.json --world 2 --profile "$a100" $pp2 --set batch.micro_batch_size=8 --blocking-p2p \
  > p2p_m1.log 2>&1 && fail "--blocking-p2p interleaved with 1 micro-batch on 2 ranks accepted"
grep -q "deadlocks with blocking point-to-point" p2p_m1.log || { cat p2p_m1.log; fail "--blocking-p2p deadlock message"; }

# A mixture of experts: total and active parameters (top_k of n_experts experts per block), in both forms.
"$cleave" simulate --config "$source_dir/examples/moe/config.json" --set data.type=synthetic --set data.path= --world 2 > moe.log 2>&1 \
  || { cat moe.log; fail "simulate --config moe"; }
"$cleave" simulate --config "$source_dir/examples/moe/config.json" --set data.type=synthetic --set data.path= --world 2 --json \
  > moe.json 2> moe_json.log || { cat moe_json.log; fail "simulate --config moe --json"; }
python3 - moe.log moe.json "$source_dir/examples/moe/config.json" << 'PY' || fail "moe parameters"
import json, re, sys
text, out, m = open(sys.argv[1]).read(), json.load(open(sys.argv[2])), json.load(open(sys.argv[3]))["model"]
got = re.search(r"parameters: (\d+) total, (\d+) active per token", text)
assert got, text
total, active = int(got.group(1)), int(got.group(2))
assert (out["param_count"], out["active_param_count"]) == (total, active), out
d, f, e, k = m["d_model"], m["ffn_hidden_size"], m["n_experts"], m["top_k"]
# Every block's unchosen experts (e - k SwiGLUs of 3·d·f) are the difference.
assert total - active == m["n_layers"] * 3 * d * f * (e - k), (total, active)
print(f"ok   simulate --config moe: {total} parameters, {active} active per token")
PY
# The memory plan's host line: the moe example planned on a GPU (the A100 profile; its config says cpu, the plan
# runs where the profile is) shows each plan's page-locked host memory per rank (a column, a note, --json's
# host_pinned_bytes), as simulate --config does, and so does the dense tiny model on the A100 profile (its staged
# micro-batches and losses row, more for the moe model's routing staging); on this machine's profile, nothing.
"$cleave" plan "$source_dir/examples/moe/config.json" --set data.type=synthetic --set data.path= --world 2 \
  --profile "$a100" --top 3 --json moe_plans.json > moe_plan.log 2>&1 || { cat moe_plan.log; fail "plan moe on a GPU profile"; }
"$cleave" plan tiny.json --world 2 --profile "$a100" --top 3 --json dense_plans.json > dense_plan.log 2>&1 \
  || { cat dense_plan.log; fail "plan the dense tiny model on a GPU profile"; }
"$cleave" simulate --config "$source_dir/examples/moe/config.json" --set data.type=synthetic --set data.path= --world 2 \
  --profile "$a100" --json > moe_gpu.json 2> moe_gpu.log || { cat moe_gpu.log; fail "simulate --config moe on a GPU profile"; }
python3 - moe_plan.log moe_plans.json moe_gpu.json moe.json plan.log dense_plan.log dense_plans.json << 'PY' \
  || { cat moe_plan.log dense_plan.log; fail "the host line"; }
import json, re, sys
text, plans, gpu, cpu, dense = open(sys.argv[1]).read(), json.load(open(sys.argv[2])), json.load(open(sys.argv[3])), \
    json.load(open(sys.argv[4])), open(sys.argv[5]).read()
dense_gpu, dense_plans = open(sys.argv[6]).read(), json.load(open(sys.argv[7]))
header = next(l for l in text.split("\n") if l.startswith("  #  layout"))
assert "host pinned" in header and header.index("host pinned") < header.index("peak memory / rank"), header
rows = [l for l in text.split("\n") if re.match(r"^\s+\d+\s+tp\d", l)]
assert rows and all(re.search(r"\d+\.\d\d (KiB|MiB|GiB)\s+\S+ \S+ \(pp rank", l) for l in rows), rows
assert "host pinned: the page-locked host memory" in text
assert all(p["host_pinned_bytes"] > 0 for p in plans["plans"]), plans["plans"]
assert all(r["host_pinned_bytes"] > 0 for r in gpu["ranks"]), gpu["ranks"]
assert all(r["host_pinned_bytes"] == 0 for r in cpu["ranks"]), cpu["ranks"]
assert "host pinned" not in dense
dense_header = next(l for l in dense_gpu.split("\n") if l.startswith("  #  layout"))
assert "host pinned" in dense_header and "host pinned: the page-locked host memory" in dense_gpu, dense_gpu
assert all(p["host_pinned_bytes"] > 0 for p in dense_plans["plans"]), dense_plans["plans"]
print(f"ok   the host line: plan #1 {plans['plans'][0]['host_pinned_bytes']} B page-locked on pp rank "
      f"{plans['plans'][0]['host_pinned_rank']} (A100 profile), the dense plan #1 "
      f"{dense_plans['plans'][0]['host_pinned_bytes']} B; none on this machine")
PY

# The table's columns line up whatever the layout's length: the moe example on 4 ranks ranks cp4 and ep2 layouts
# ("tp1 cp4 pp1 dp1 ep2", 19 characters; from #43 on the A100 profile, so the top 120), beside the 13 the layout
# column had (every later column moved).
"$cleave" plan "$source_dir/examples/moe/config.json" --set data.type=synthetic --set data.path= --world 4 \
  --profile "$a100" --top 120 > moe4_plan.log 2>&1 || { cat moe4_plan.log; fail "plan moe on 4 ranks"; }
python3 - moe4_plan.log << 'PY' || { cat moe4_plan.log; fail "the plan table's columns"; }
import itertools, re, sys
lines = open(sys.argv[1]).read().split("\n")
header = next(l for l in lines if l.startswith("  #  layout"))
rows = [l for l in lines if re.match(r"^\s+\d+\s+tp\d", l)]
layouts = {" ".join(itertools.takewhile(lambda w: re.match(r"^[a-z]+\d", w), l.split()[1:])) for l in rows}
assert any(" ep2" in x for x in layouts) and any(len(x) > 13 for x in layouts), layouts
v, schedule = header.index(" v ") + 1, header.index("schedule")  # v right-aligned, schedule left-aligned
for l in rows:
    assert l[v].isdigit() and l[v + 1] == " " and l[schedule - 1] == " " and l[schedule] != " ", (header, l)
print(f"ok   the plan table's columns line up over {len(rows)} rows, layouts up to {max(map(len, layouts))} characters")
PY

# Bad input.
# A world no plan is valid for: bad input (exit 64; it exited 1), naming the most frequent reasons with their counts
# (it named the first plan's reason only, whichever that was).
"$cleave" plan tiny.json --world 7 --set model.n_layers=2 > bad1.log 2>&1; status=$?
[ $status -eq 64 ] || { cat bad1.log; fail "world 7: exit $status, expected 64"; }
grep -q "plan: none of the [0-9]* plans of 7 ranks is valid for this config: [0-9]* plans: --set parallel\.pipeline_model_parallel_size=7: parallel\.pipeline_model_parallel_size: 7 pipeline stages .* but the model has only 6 blocks.*; change --world or the config" bad1.log \
  || { cat bad1.log; fail "world 7 message"; }
# A large world answers in seconds (each pipeline schedule is built once and reused; a layout with more stages
# than blocks is refused before its schedule is built: before, --world 128 took over 5 minutes), and a world no
# layout can use is refused before the search, naming the flag, the number and the limit.
start=$(date +%s)
"$cleave" plan tiny.json --world 1024 --profile "$source_dir/profiles/h100_sxm.json" --top 1 > big.log 2>&1 \
  || { cat big.log; fail "--world 1024"; }
took=$(( $(date +%s) - start ))
grep -q "^  1  tp" big.log && [ "$took" -le 60 ] || { cat big.log; fail "--world 1024 took ${took} s (limit 60)"; }
echo "ok   --world 1024 answered in ${took} s"
"$cleave" plan tiny.json --world 1000000 --profile "$source_dir/profiles/h100_sxm.json" > huge.log 2>&1 \
  && fail "--world 1000000 accepted"
grep -q "plan: --world 1000000 is more ranks than any layout of this config can use: at most [0-9]* = tp" huge.log \
  || { cat huge.log; fail "--world 1000000 message"; }
"$cleave" plan tiny.json --world 2 --memory-limit 4KiB > bad2.log 2>&1 && fail "a 4 KiB cap accepted"
grep -q "no plan fits the memory cap 4.00 KiB.*smallest need per category.*parameters.*Closest: tp" bad2.log \
  || { cat bad2.log; fail "cap message"; }
# The same cap from the config (device.memory_limit) counts the same plans as over it and quotes the same
# closest plan (it used to count them as refused by the engine and quote another).
"$cleave" plan tiny.json --world 2 --set device.memory_limit=4KiB > bad2c.log 2>&1 && fail "a 4 KiB config cap accepted"
closest() { grep -o '([0-9]* plans over it, [0-9]* invalid).* on pp rank [0-9]*' "$1"; }
[ -n "$(closest bad2.log)" ] && [ "$(closest bad2.log)" = "$(closest bad2c.log)" ] && grep -q "raise device.memory_limit" bad2c.log \
  || { cat bad2.log bad2c.log; fail "a cap from the config counts or quotes plans differently from --memory-limit"; }
"$cleave" plan tiny.json --world 2 --memory-limit 600KiB > cap1.log 2>&1 || { cat cap1.log; fail "600 KiB cap"; }
"$cleave" plan tiny.json --world 2 --set device.memory_limit=600KiB > cap2.log 2>&1 || { cat cap2.log; fail "600 KiB config cap"; }
[ "$(grep 'plans that fit shown' cap1.log)" = "$(grep 'plans that fit shown' cap2.log)" ] && grep -q "0 the engine refuses\| [1-9][0-9]* over the memory cap" cap2.log \
  || { grep 'plans that fit' cap1.log cap2.log; fail "a cap from the config counts plans differently"; }
"$cleave" plan tiny.json --world 2 --profile nothere.json > bad3.log 2>&1 && fail "a missing profile accepted"
grep -q "profile nothere.json: cannot open it" bad3.log || { cat bad3.log; fail "missing profile message"; }
sed 's/"memory_bandwidth_GBps": [0-9.]*,//' "$source_dir/profiles/a100_80gb_sxm.json" > broken.json
"$cleave" plan tiny.json --world 2 --profile broken.json > bad4.log 2>&1 && fail "a profile without memory bandwidth accepted"
grep -q "profile broken.json: missing key 'memory_bandwidth_GBps'" bad4.log || { cat bad4.log; fail "broken profile message"; }
before=$(md5sum best.json)
"$cleave" plan tiny.json --world 2 --write best.json > bad5.log 2>&1 && fail "--write overwrote a file"
grep -q "best.json exists; not overwriting it" bad5.log || { cat bad5.log; fail "overwrite message"; }
[ "$before" = "$(md5sum best.json)" ] || fail "best.json changed"
# A --write or --json path that cannot be written fails before the search (minutes at a large --world), naming the
# option: no header, no table; one whose directories do not exist yet is created.
"$cleave" plan tiny.json --world 2 --write tiny.json/best.json > bad6.log 2>&1 && fail "--write under a file accepted"
grep -q "error: plan: --write tiny.json/best.json" bad6.log && ! grep -q "cleave plan: tiny.json on 2 ranks" bad6.log \
  || { cat bad6.log; fail "an unwritable --write was not refused before the search"; }
"$cleave" plan tiny.json --world 2 --json tiny.json/plans.json > bad7.log 2>&1 && fail "--json under a file accepted"
grep -q "error: plan: --json tiny.json/plans.json" bad7.log || { cat bad7.log; fail "an unwritable --json message"; }
"$cleave" plan tiny.json --world 2 --write new/dir/best.json --json new/plans.json > newdir.log 2>&1 && \
  [ -s new/dir/best.json ] && [ -s new/plans.json ] || { cat newdir.log; fail "--write / --json into new directories"; }
# Options that would be accepted and do nothing: a --trial setting without --trial, --ep-imbalance on a model
# without experts (tiny.json is a gpt). Refused before the machine is measured (no header).
"$cleave" plan tiny.json --world 2 --trial-steps 3 > bad8.log 2>&1 && fail "--trial-steps without --trial accepted"
grep -q "error: plan: --trial-steps sets how --trial K trains the top plans, and no --trial was given" bad8.log \
  && ! grep -q "cleave plan: tiny.json on 2 ranks" bad8.log || { cat bad8.log; fail "--trial-steps without --trial"; }
"$cleave" plan tiny.json --world 2 --ep-imbalance 1.5 > bad9.log 2>&1 && fail "--ep-imbalance on a gpt accepted"
grep -q "error: plan: --ep-imbalance 1.5 prices expert parallelism, and model.type gpt has no experts" bad9.log \
  || { cat bad9.log; fail "--ep-imbalance on a model without experts"; }
"$cleave" plan tiny.json --world 16 --profile "$source_dir/profiles/h100_sxm.json" --top 1 > h100.log 2>&1 || { cat h100.log; fail "h100 profile"; }
echo "ok   bad input refused: $(grep -o 'no plan fits the memory cap.*' bad2.log | cut -c1-100)..."

# Oversubscription: a profile of 2 cores per node, planned for 4 ranks, prices each rank at half a core and warns
# naming the layout, the ranks and the cores; the same profile without the core count neither warns nor scales.
python3 - "$source_dir/profiles/a100_80gb_sxm.json" << 'PY'
import json, sys
p = json.load(open(sys.argv[1]))
p["cores_per_node"], p["measured_ranks_per_node"] = 2, 2
json.dump(p, open("two_cores.json", "w"))
PY
"$cleave" plan tiny.json --world 4 --profile two_cores.json --top 1 --json shared.json > over.log 2>&1 || { cat over.log; fail "plan on 2 cores"; }
grep -qE "^warning: tp[0-9] (cp[0-9]+(a2a)? )?pp[0-9] dp[0-9] puts 4 ranks on a node of 2 cores \(2\.0 ranks per core\)" over.log \
  || { cat over.log; fail "no oversubscription warning naming layout, ranks and cores"; }
"$cleave" plan tiny.json --world 4 --profile "$source_dir/profiles/a100_80gb_sxm.json" --top 1 --json own.json > own.log 2>&1 \
  || { cat own.log; fail "plan on the a100 profile"; }
grep -q "ranks on a node" own.log && fail "a GPU profile (a device per rank) warned of shared cores"
python3 - shared.json own.json << 'PY' || fail "4 ranks on 2 cores are not priced slower than 4 devices"
import json, sys
shared, own = (json.load(open(f))["plans"][0]["step_s"] for f in sys.argv[1:3])
assert shared > 1.05 * own, (shared, own)  # compute x2; the unit test checks the factor exactly
PY
echo "ok   oversubscription warned: $(grep -o 'puts 4 ranks.*per core)' over.log | head -1)"

# --trial 2: the top two plans trained for real under the launcher in 2 interleaved rounds (A B A B), median and
# spread per plan, re-ranked only where one plan's range clears the other's; a progress line per run on stderr.
"$cleave" plan tiny.json --world 2 --top 2 --trial 2 --trial-steps 4 --trial-rounds 2 --launcher "${mpiexec[*]}" \
  --json trial.json > trial.log 2>&1 || { cat trial.log; fail "plan --trial 2"; }
[ "$(grep -c '^trial: round [12]/2, plan [12] of 2 (#[12] tp.* recompute [a-z]*): median step [0-9.]* ms' trial.log)" -eq 4 ] \
  || { cat trial.log; fail "no progress line per trial run"; }
grep -q "^stopped: \(the most rounds, 2 (--trial-rounds)\|every spread <= 5.0% after 2 rounds\)" trial.log \
  || { cat trial.log; fail "--trial does not say why it stopped"; }
python3 - trial.log trial.json << 'PY' || { cat trial.log; fail "--trial output"; }
import json, re, sys
rows = [l.split() for l in open(sys.argv[1]) if re.match(r"^\s+\d+=?\s+\d+\s+tp\d", l)]
assert len(rows) == 2, rows
assert sorted(int(r[1]) for r in rows) == [1, 2], rows
for r in rows:
    pred, meas, spread, rounds, ratio = float(r[-5]), float(r[-4]), float(r[-3].rstrip("%")) / 100, int(r[-2]), float(r[-1])
    assert meas > 0 and rounds == 2 and 0 <= spread < 1, r
    assert abs(pred / meas - ratio) < 0.01, r
plans = json.load(open(sys.argv[2]))["plans"]
by_pred = {int(r[1]): r for r in rows}
for p in plans[:2]:
    assert p["measured_step_s"] > 0 and len(p["measured_rounds"]) == 2 and p["measured_spread"] >= 0, p
lo = lambda p: p["measured_step_s"] * (1 - p["measured_spread"])
hi = lambda p: p["measured_step_s"] * (1 + p["measured_spread"])
a, b = plans[0], plans[1]
clear_b = hi(b) < lo(a)  # predicted #2 clears #1: only then does it move ahead
assert int(rows[0][1]) == (2 if clear_b else 1), (rows, a, b)
tied = rows[1][0].endswith("=")
assert tied == (not (hi(a) < lo(b)) and not clear_b), (rows, a, b)
print(f"ok   trial: #1 {a['measured_step_s']*1e3:.2f} ms +-{a['measured_spread']:.1%}, #2 {b['measured_step_s']*1e3:.2f} ms "
      f"+-{b['measured_spread']:.1%}: {'re-ranked' if clear_b else 'tied' if tied else 'kept'}")
PY
echo "ok   --trial 2: $(grep -A2 'pred/meas' trial.log | tail -2 | tr -s ' ' | tr '\n' ';') $(grep -o 're-ranked.*\|the planner.s #1 .*' trial.log)"

# A --set data.path is relative to the working directory: the trial's configs (written to a temporary directory)
# and --write into another directory keep naming that file (they named it relative to the written file: every
# trial run failed, and sub/best.json read sub/corpus.txt).
python3 -c "print('the quick brown fox jumps over the lazy dog. ' * 40)" > corpus.txt
text=(--set model.vocab_size=256 --set data.type=text --set data.path=corpus.txt)
"$cleave" plan tiny.json --world 2 --top 1 --trial 1 --trial-steps 3 --trial-rounds 1 --launcher "${mpiexec[*]}" \
  "${text[@]}" --write sub/best_text.json > trial_text.log 2>&1 || { cat trial_text.log; fail "--trial with --set data.path"; }
grep -q "median step" trial_text.log || { cat trial_text.log; fail "the trial with --set data.path trained nothing"; }
python3 -c "import json,os,sys; p=json.load(open('sub/best_text.json'))['data']['path']; sys.exit(p != os.path.abspath('corpus.txt'))" \
  || { cat sub/best_text.json; fail "--write sub/best_text.json does not name ./corpus.txt"; }
echo "ok   --trial and --write with --set data.path=corpus.txt (relative to the working directory)"
# A plan that fails to train is listed with the run's own error line (it was mpiexec's closing banner, "-----").
"$cleave" plan tiny.json --world 2 --top 1 --trial 1 --trial-steps 3 --trial-rounds 1 --launcher "${mpiexec[*]}" \
  "${text[@]}" --set data.path=missing.txt > trial_fail.log 2>&1 \
  && { cat trial_fail.log; fail "a trial where no plan trains succeeded"; }
# (A missing data file is bad input: exit 64, engine/core/exit_code.hpp.)
grep -q "failed (exit 64: .*error: data file .*/missing.txt: no such file" trial_fail.log \
  || { cat trial_fail.log; fail "the failed trial run is not named by its error line"; }
echo "ok   a failed trial run: $(grep -o 'failed (exit 64: .*' trial_fail.log | head -1)"

# --trial 2 --explain: each trained plan's traced step against its prediction row by row (no timing asserted):
# a table per plan whose measured rows sum to its measured total, a row named as the largest disagreement, and the
# same rows in --json.
"$cleave" plan tiny.json --world 2 --top 2 --trial 2 --trial-steps 3 --trial-rounds 1 --explain --launcher "${mpiexec[*]}" \
  --json explain.json > explain.log 2>&1 || { cat explain.log; fail "plan --trial 2 --explain"; }
python3 - explain.log explain.json << 'PY' || { cat explain.log; fail "--trial --explain's measured rows"; }
import json, re, sys
text = open(sys.argv[1]).read()
assert "predicted against measured, term by term" in text, "no term-by-term section"
blocks = re.findall(r"^plan #(\d) .*traced step\(s\).*\n((?:  .*\n)+)", text, re.M)
assert sorted(b[0] for b in blocks) == ["1", "2"], blocks
for place, table in blocks:
    lines = table.splitlines()
    assert lines[0].split()[:3] == ["row", "(measured", "spans)"], lines[0]
    rows = {}
    for l in lines[1:]:
        m = re.match(r"^  (\S.*?)\s{2,}(\d+\.\d+)\s+(\d+\.\d+)\s+(\S+)", l)
        if m: rows[m.group(1)] = (float(m.group(2)), float(m.group(3)))
    assert "total" in rows and "forward (F)" in rows, rows
    parts = sum(meas for name, (pred, meas) in rows.items() if name != "total")
    assert abs(parts - rows["total"][1]) <= 0.002 * len(rows), (place, parts, rows["total"])
    for name in rows:  # a wait row (layers/comm_wait.hpp) sits beside the planner's term of its kind
        if "(waits in F/I/W)" in name:
            assert name.split()[0] in ("tp", "cp", "zero_gather", "expert_all_to_all"), name
    worst = [n for n in rows if n != "total" and f"largest disagreement: {n} (" in table]
    assert len(worst) == 1, (place, table)
plans = json.load(open(sys.argv[2]))["plans"]
for p in plans[:2]:
    names = [r["row"] for r in p["measured_terms"]]
    assert names[-1] == "total" and p["largest_disagreement"] in names[:-1] and p["traced_steps"] == 1, p
    assert all(r["measured_s"] >= 0 and r["predicted_s"] >= 0 for r in p["measured_terms"]), p
print(f"ok   --trial --explain: {len(blocks)} tables; largest disagreement #1 {plans[0]['largest_disagreement']}, "
      f"#2 {plans[1]['largest_disagreement']}")
PY

# The trainer's waits on collectives inside compute spans (layers/comm_wait.hpp; no timing asserted): a tp2 run's
# and a cp2 run's traced F and I/B spans carry wait_tp_us / wait_cp_us, and read back through --explain's
# attribution they make their own rows (checked on the trial's tables above when a tp or cp plan was trained).
for lever in tp cp; do
  key=$([ $lever = tp ] && echo tensor_model_parallel_size || echo context_parallel_size)
  "${mpiexec[@]}" -n 2 "$cleave" train tiny.json --set parallel.$key=2 --set train.trace=true --set train.steps=3 \
    --set train.out_dir=runs/$lever > $lever.log 2>&1 || { cat $lever.log; fail "$lever 2 traced run"; }
  python3 - runs/$lever/trace.json $lever << 'PY' || fail "$lever 2's trace has no waits on its collectives"
import json, sys
events = [e for e in json.load(open(sys.argv[1]))["traceEvents"] if e.get("ph") == "X"]
key = f"wait_{sys.argv[2]}_us"
waits = [e for e in events if e["cat"] in ("F", "I", "B") and e["args"].get(key, 0) > 0]
assert {e["cat"] for e in waits} >= {"F"} and len({e["cat"] for e in waits}) >= 2, [e["args"] for e in events]
assert all(e["args"][key] <= e["dur"] + 1 for e in waits), waits
assert not any(k.startswith("wait_") for e in events if e["cat"] in ("SEND_F", "RECV_F", "OPTIMIZER_STEP") for k in e["args"])
print(f"ok   {sys.argv[2]}2 trace: {len(waits)} compute spans carry {key}, {sum(e['args'][key] for e in waits):.0f} us in all")
PY
done

# A budget spent after the first round: one round, no spread, the predicted order kept.
"$cleave" plan tiny.json --world 2 --top 2 --trial 2 --trial-steps 3 --trial-budget 0 --launcher "${mpiexec[*]}" \
  > budget.log 2>&1 || { cat budget.log; fail "plan --trial --trial-budget 0"; }
grep -q "^stopped: the budget of 0 s would end during round 2" budget.log || { cat budget.log; fail "budget stop"; }
python3 - budget.log << 'PY' || { cat budget.log; fail "one round re-ranked the plans"; }
import re, sys
rows = [l.split() for l in open(sys.argv[1]) if re.match(r"^\s+\d+=?\s+\d+\s+tp\d", l)]
assert [r[1] for r in rows] == ["1", "2"] and [r[0] for r in rows] == ["1=", "1="], rows
assert all(r[-3] == "-" and r[-2] == "1" for r in rows), rows
PY
echo "ok   --trial-budget 0: one round, predicted order kept, shown tied"
