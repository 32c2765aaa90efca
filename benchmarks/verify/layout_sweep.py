#!/usr/bin/env python3
"""Random layout sweep for `cleave verify`: the layouts nobody wrote a test for.

Draws combinations from a fixed seed (model family and its MoE router kinds and shared experts, tp, sequence
parallelism, cp ring / all_to_all, pp with every schedule and virtual stages, recomputation, dp with ZeRO 0-3, ep and
moe_a2a_overlap, bf16, micro-batch size, gradient accumulation, SGD / AdamW) on at most 4 ranks and tiny models,
runs `cleave verify` on each under a timeout and classifies the outcome:

  pass      exit 0, the report ends in PASS
  mismatch  exit 1 with a report ending in FAIL (a loss or parameter beyond verify's bound)
  routing   exit 1 with FAIL (routing diverged ...): a moe layout sent some token to another expert than one rank did
            (verify compares the tokens per expert of each step; one or two: a near-tie its roundings tipped); replayed
            by --triage with model.forced_routing uniform
  refused   exit 64, `error:` naming the refusal; each is checked against what the docs say is supported
            (`doc_refusals` below: the documented rules; an engine refusal of a draw they accept is `unexpected`,
            and a message that names no config key is `unclear`)
  crash     any other exit, or exit 1 without a report
  hang      past --timeout (the job's process group is ended)

Draws are not filtered by validity: an invalid one is the engine's config checks to refuse. The invariant: draw i of
seed s is the same configuration on every machine and in every run (`--only i` replays it).

Usage: layout_sweep.py --cleave build/bin/cleave [--count N] [--seed S] [--timeout T] [--out FILE.jsonl]
       layout_sweep.py --cleave ... --triage FILE.jsonl   (replays each mismatch: triage_replay)
       layout_sweep.py --summary FILE.jsonl      (counts per feature and outcome, the failures and refusals)
       layout_sweep.py --cleave ... --only I [--override key.path=JSON ...] [--steps N]   (reduce one draw)
       layout_sweep.py --cleave ... --smoke      (the fixed handful ctest's e2e_layout_sweep_smoke runs)
Python 3 standard library only.
"""
import argparse
import collections
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

SEED = 20261201
SCHEDULES = ["gpipe", "1f1b", "interleaved_1f1b", "zb_h1", "zb_h2", "zb_v", "dualpipev", "auto"]
TWO_CHUNK = {"interleaved_1f1b", "zb_v", "dualpipev"}  # schedules whose default is 2 chunks per rank


def split_world(rng, world):
    """tp, cp, dp, pp with tp * cp * dp * pp == world: each prime factor of world goes to a random axis."""
    axes = {"tp": 1, "cp": 1, "dp": 1, "pp": 1}
    n = world
    for p in (2, 3):
        while n % p == 0:
            axes[rng.choice(list(axes))] *= p
            n //= p
    return axes


def draw_model(rng, family):
    seq = rng.choices([8, 12, 16], weights=[3, 1, 4])[0]
    layers = rng.choices([2, 4, 6, 8], weights=[2, 5, 1, 2])[0]
    m = {"type": family, "vocab_size": 64, "n_layers": layers, "seq_len": seq}
    if family == "gpt":
        m.update(d_model=32, n_heads=4)
        if rng.random() < 0.2:
            m["tie_embeddings"] = False
    elif family == "llama":
        m.update(d_model=32, n_heads=4, n_kv_heads=rng.choice([1, 2, 4]), ffn_hidden_size=48)
        if rng.random() < 0.2:
            m["qkv_bias"] = True
        if rng.random() < 0.15:
            m["qk_norm"] = True
        if rng.random() < 0.2:
            m["tie_embeddings"] = True
        if rng.random() < 0.15:
            m["sliding_window"] = rng.choice([3, 5])
    else:
        m.update(d_model=16, n_heads=4, n_kv_heads=rng.choice([2, 4]), ffn_hidden_size=12,
                 n_experts=rng.choices([4, 8], weights=[3, 1])[0], top_k=rng.choice([1, 2]),
                 router=rng.choice(["softmax", "sigmoid"]), z_loss_coef=rng.choice([0, 0.01]))
        if rng.random() < 0.4:
            m["n_shared_experts"] = rng.choice([1, 2])
            if rng.random() < 0.5:
                m["shared_expert_gate"] = True
        if m["router"] == "sigmoid" and rng.random() < 0.4:
            m["bias_update_rate"] = 0
    return m


def draw(seed, index):
    """Draw `index` of `seed`: (world size, config dict, list of --set overrides, verify options)."""
    rng = random.Random(f"{seed}:{index}")
    family = rng.choices(["gpt", "llama", "moe"], weights=[3, 3, 4])[0]
    world = rng.choices([2, 3, 4], weights=[4, 1, 6])[0]
    ax = split_world(rng, world)
    model = draw_model(rng, family)
    par = {"tensor_model_parallel_size": ax["tp"], "context_parallel_size": ax["cp"],
           "pipeline_model_parallel_size": ax["pp"]}
    if rng.random() < 0.5:
        par["data_parallel_size"] = ax["dp"]
    if ax["tp"] > 1 and rng.random() < 0.5 or rng.random() < 0.03:
        par["sequence_parallel"] = True
    if ax["cp"] > 1 or rng.random() < 0.03:
        par["context_parallel_comm"] = rng.choice(["ring", "all_to_all"])
    if ax["pp"] > 1 or rng.random() < 0.05:
        par["schedule"] = rng.choice(SCHEDULES)
        if par["schedule"] in ("interleaved_1f1b",) and rng.random() < 0.3:
            par["virtual_pipeline_stages"] = rng.choice([2, 3])
        elif rng.random() < 0.05:
            par["virtual_pipeline_stages"] = rng.choice([2, 3])
    if family == "moe":
        group = ax["dp"] * ax["cp"]
        eps = [e for e in (1, 2, 4) if group % e == 0]
        par["expert_model_parallel_size"] = rng.choice(eps) if rng.random() < 0.9 else rng.choice([2, 4])
        if par.get("schedule") == "dualpipev" and par["expert_model_parallel_size"] > 1 and rng.random() < 0.6 \
                or rng.random() < 0.03:
            par["moe_a2a_overlap"] = True
    micro = rng.choice([1, 2, 4])
    # pipelines see more micro-batches (dualpipev needs 2 pp), others fewer
    accum = rng.choice([1, 2, 4, 8] if ax["pp"] > 1 and rng.random() < 0.6 else [1, 2, 3, 4])
    batch = {"micro_batch_size": micro}
    if rng.random() < 0.5:
        batch["gradient_accumulation_steps"] = accum
    else:
        batch["global_batch_size"] = micro * accum * ax["dp"]
    opt_type = rng.choices(["sgd", "adamw"], weights=[3, 1])[0]
    if opt_type == "sgd":
        opt = {"type": "sgd", "lr": 0.5, "momentum": 0.9, "grad_clip": rng.choice([0, 0.2]), "weight_decay": 0.05}
    else:
        opt = {"type": "adamw", "lr": 0.01, "warmup_steps": 2}
    opt["zero_stage"] = rng.choice([0, 1, 2, 3])
    train = {"recompute": rng.choice(["none", "selective", "full"]), "comm_timeout_s": 60}
    if rng.random() < 0.25:  # verify's default is deterministic mode; training's is not (ZeRO-2/3 reduce per micro-batch)
        train["deterministic"] = False
    device = {"precision": "bf16"} if rng.random() < 0.25 else {}
    config = {"model": model, "parallel": par, "batch": batch, "optimizer": opt, "train": train,
              "data": {"type": "synthetic"}}
    if device:
        config["device"] = device
    steps = rng.choice([3, 4])
    # DualPipeV's overlapped MoE all-to-alls need moe, pp > 1, ep > 1 out of dp x cp and 2 pp micro-batches: too rare
    # a conjunction to draw by chance, so half the moe pipelines that could run it are made to
    if family == "moe" and ax["pp"] > 1 and ax["dp"] * ax["cp"] > 1 and rng.random() < 0.5:
        par.update(schedule="dualpipev", expert_model_parallel_size=2, moe_a2a_overlap=True)
        par.pop("virtual_pipeline_stages", None)
        batch.pop("global_batch_size", None)
        batch["gradient_accumulation_steps"] = rng.choice([2, 4]) * ax["pp"]
    return world, config, steps


def features(world, cfg):
    """The feature labels a draw counts under in the summary."""
    m, p, b, o = cfg["model"], cfg["parallel"], cfg["batch"], cfg["optimizer"]
    f = [f"family={m['type']}", f"world={world}", f"tp={p['tensor_model_parallel_size']}",
         f"cp={p['context_parallel_size']}", f"pp={p['pipeline_model_parallel_size']}",
         f"zero={o['zero_stage']}", f"recompute={cfg['train']['recompute']}", f"optimizer={o['type']}",
         f"precision={cfg.get('device', {}).get('precision', 'fp32')}", f"micro_batch={b['micro_batch_size']}",
         f"accum={b.get('gradient_accumulation_steps', 'via-global')}"]
    if cfg["train"].get("deterministic") is False:
        f.append("nondeterministic")
    if m.get("sliding_window"):
        f.append("sliding_window")
    dp = world // (p['tensor_model_parallel_size'] * p['context_parallel_size'] * p['pipeline_model_parallel_size'])
    f.append(f"dp={dp}")
    if p.get("sequence_parallel"):
        f.append("sequence_parallel")
    if p["context_parallel_size"] > 1:
        f.append(f"cp_comm={p.get('context_parallel_comm', 'ring')}")
    if "schedule" in p:  # a schedule at pp 1 runs nothing of its own
        f.append(f"schedule={p['schedule']}" if p["pipeline_model_parallel_size"] > 1 else "schedule-at-pp1")
    if "virtual_pipeline_stages" in p and p["pipeline_model_parallel_size"] > 1:
        f.append(f"vpp={p['virtual_pipeline_stages']}")
    if m["type"] == "moe":
        f += [f"router={m['router']}", f"ep={p['expert_model_parallel_size']}", f"top_k={m['top_k']}",
              f"experts={m['n_experts']}"]
        if m.get("n_shared_experts"):
            f.append("shared_experts" + ("+gate" if m.get("shared_expert_gate") else ""))
        if p.get("moe_a2a_overlap"):
            f.append("moe_a2a_overlap")
    return f


def doc_refusals(world, cfg):
    """What docs/config.md and docs/multi-rank.md say should be refused in this draw (a list of reasons; empty: the
    docs say the layout is supported). Only the rules the draws can break are written out."""
    m, p, b, o = cfg["model"], cfg["parallel"], cfg["batch"], cfg["optimizer"]
    tp, cp, pp = p["tensor_model_parallel_size"], p["context_parallel_size"], p["pipeline_model_parallel_size"]
    dp = world // (tp * cp * pp)
    r = []
    kv = m.get("n_kv_heads", m["n_heads"])
    if m["n_heads"] % tp or kv % tp:
        r.append("tp must divide n_heads and n_kv_heads")
    inner = m.get("ffn_hidden_size", m.get("d_ff", 4 * m["d_model"]))
    if inner % tp:
        r.append("tp must divide the ffn size")
    if p.get("sequence_parallel") and (tp == 1 or m["seq_len"] % tp):
        r.append("sequence_parallel needs tp > 1 dividing seq_len")
    comm = p.get("context_parallel_comm", "ring")
    if cp == 1 and comm != "ring":
        r.append("context_parallel_comm other than ring at cp 1")
    if cp > 1 and comm == "ring" and m["seq_len"] % (2 * cp):
        r.append("ring needs seq_len divisible into 2 cp chunks")
    if cp > 1 and comm == "all_to_all" and (m["seq_len"] % cp or (m["n_heads"] // tp) % cp or (kv // tp) % cp):
        r.append("all_to_all needs seq_len, heads and kv heads per tp rank divisible by cp")
    sched = p.get("schedule", "1f1b")
    vpp = p.get("virtual_pipeline_stages", 1)
    if vpp > 1 and sched in ("zb_v", "dualpipev") and vpp != 2:
        r.append("zb_v and dualpipev accept only 2 virtual stages")
    if vpp > 1 and sched == "auto":
        r.append("auto accepts only 1 virtual stage")
    if vpp > 1 and sched in ("gpipe", "1f1b", "zb_h1", "zb_h2"):
        r.append("virtual stages on a one-chunk schedule")
    chunks = vpp if vpp > 1 else 2 if sched in TWO_CHUNK else 1
    if pp > 1 and pp * chunks > m["n_layers"] + 4:
        r.append("more pipeline stages than blocks (n_layers + 4, docs/config.md blocks_per_stage)")
    if m["type"] == "moe":
        ep = p["expert_model_parallel_size"]
        if m["n_experts"] % ep or (dp * cp) % ep:
            r.append("ep must divide n_experts and dp x cp")
        if p.get("moe_a2a_overlap") and (sched != "dualpipev" or ep < 2):
            r.append("moe_a2a_overlap needs dualpipev and ep > 1")
        if m["router"] == "sigmoid" and m.get("bias_update_rate", 0.001) != 0 and o["zero_stage"] == 3 and dp * cp > 1:
            r.append("sigmoid bias update under ZeRO-3 over dp x cp > 1")
    if "global_batch_size" in b and b["global_batch_size"] % (b["micro_batch_size"] * dp):
        r.append("global batch not a multiple of micro x dp")
    micro_batches = b.get("gradient_accumulation_steps") or b.get("global_batch_size", 0) // (b["micro_batch_size"] * dp)
    if sched == "dualpipev" and pp > 1 and micro_batches < 2 * pp:
        r.append("dualpipev needs at least 2 pp micro-batches per step (docs/schedules.md)")
    return r


KEY = re.compile(r"(model|parallel|batch|optimizer|train|device|data)\.[a-z_]+|--set|--steps")


def first_error(text):
    for line in text.splitlines():
        s = re.sub(r"^\[rank \d+/\d+\] ", "", line.strip())
        if s.startswith("error"):
            return s
    return ""


def run_one(cleave, mpiexec, world, cfg, steps, timeout):
    work = tempfile.mkdtemp(prefix="layout_sweep_")
    try:
        with open(os.path.join(work, "c.json"), "w") as fh:
            json.dump(cfg, fh)
        cmd = mpiexec + ["-n", str(world), cleave, "verify", "c.json", "--steps", str(steps)]
        env = dict(os.environ, OMP_WAIT_POLICY="passive", OMP_NUM_THREADS="1", OMPI_ALLOW_RUN_AS_ROOT="1",
                   OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", OMPI_MCA_btl_vader_single_copy_mechanism="none")
        start = time.monotonic()
        proc = subprocess.Popen(cmd, cwd=work, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                start_new_session=True, text=True)
        try:
            out, _ = proc.communicate(timeout=timeout)
            status = proc.returncode
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)  # the job this call started, by its own process group
            out, _ = proc.communicate()
            status = None
        return status, out, time.monotonic() - start
    finally:
        shutil.rmtree(work, ignore_errors=True)


def classify(status, out, expected):
    summary = next((l for l in out.splitlines() if l.startswith("max loss difference")), "")
    err = first_error(out)
    if status is None:
        return "hang", err or summary
    if status == 0 and summary.endswith("PASS"):
        return "pass", summary
    if status == 1 and summary.endswith("FAIL"):
        return "mismatch", summary
    if status == 1 and "FAIL (routing diverged" in summary:
        line = next((l for l in out.splitlines() if l.startswith("routing diverged")), "")
        return "routing", summary + " | " + line[:160]
    if status == 64 and err:
        notes = []
        if not expected:
            notes.append("unexpected")
        if not KEY.search(err) or len(err) < 40:
            notes.append("unclear")
        return "refused" + ("(" + ",".join(notes) + ")" if notes else ""), err
    return "crash", f"exit {status}: {err or out.strip().splitlines()[-1:] }"


def apply_overrides(cfg, overrides):
    """--override key.path=JSON (a bare word is a string): edits a replayed draw, e.g. optimizer.type=sgd."""
    for kv in overrides:
        key, _, value = kv.partition("=")
        try:
            value = json.loads(value)
        except ValueError:
            pass
        section, _, name = key.partition(".")
        if value is None:
            cfg.setdefault(section, {}).pop(name, None)
        else:
            cfg.setdefault(section, {})[name] = value


def sweep(args):
    mpiexec = args.mpiexec.split()
    indices = [args.only] if args.only is not None else range(args.start, args.start + args.count)
    deadline = time.monotonic() + args.budget if args.budget else None
    with open(args.out, "a") as log:
        for i in indices:
            if deadline and time.monotonic() > deadline:
                break
            world, cfg, steps = draw(args.seed, i)
            apply_overrides(cfg, args.override)
            steps = args.steps or steps
            expected = doc_refusals(world, cfg)
            status, out, secs = run_one(args.cleave, mpiexec, world, cfg, steps, args.timeout)
            outcome, detail = classify(status, out, expected)
            if outcome == "pass" and expected:
                outcome = "pass(doc-refusal-expected)"
            row = {"seed": args.seed, "index": i, "world": world, "steps": steps, "outcome": outcome,
                   "detail": detail, "doc_refusals": expected, "seconds": round(secs, 1), "config": cfg}
            log.write(json.dumps(row) + "\n")
            log.flush()
            print(f"{i:4d} np{world} {outcome:10s} {secs:6.1f}s {' '.join(features(world, cfg))}\n      {detail}",
                  flush=True)
            if args.keep_logs and not outcome.startswith("pass"):
                with open(f"{args.out}.{i}.log", "w") as fh:
                    fh.write(out)


SGD = {"type": "sgd", "lr": 0.5, "momentum": 0.9, "grad_clip": 0.2, "weight_decay": 0.05}


def triage_replay(cfg, routing=False):
    """The replay that separates a known limit of verify's bounds from an engine error, or None:
    - AdamW: the same draw under SGD. AdamW turns rounding noise in an element whose gradient is near zero into
      lr-sized steps (docs/multi-rank.md) and, in bf16, a few of those move later losses past the loss bound; SGD's
      update is linear in the gradient.
    - routing (verify reported the routing diverged) or MoE in bf16 (SGD): the same draw with model.forced_routing
      uniform. A layout's bf16 roundings can move a router
      score across a near-tie, sending a token to another expert (and moving a sigmoid router's selection bias by
      its sign rule); forced routing keeps the layout's arithmetic and fixes the choice."""
    cfg = json.loads(json.dumps(cfg))
    if routing:
        cfg["model"]["forced_routing"] = "uniform"
        return "routing diverged: passes with forced routing", cfg
    if cfg["optimizer"]["type"] == "adamw":
        cfg["optimizer"] = dict(SGD, zero_stage=cfg["optimizer"]["zero_stage"])
        return "adamw-only: passes under sgd", cfg
    if cfg["model"]["type"] == "moe" and cfg.get("device", {}).get("precision") == "bf16":
        cfg["model"]["forced_routing"] = "uniform"
        return "bf16 routing flip: passes with forced routing", cfg
    return None


def triage(args):
    """Replays each mismatch as triage_replay says; writes FILE.triage.jsonl (index, label, the replay's outcome)."""
    mpiexec = args.mpiexec.split()
    rows = [json.loads(l) for l in open(args.triage)]
    done = set()
    if os.path.exists(args.triage + ".triage.jsonl"):
        done = {json.loads(l)["index"] for l in open(args.triage + ".triage.jsonl")}
    with open(args.triage + ".triage.jsonl", "a") as log:
        for r in rows:
            replay = (triage_replay(r["config"], r["outcome"] == "routing")
                      if r["outcome"] in ("mismatch", "routing") else None)
            if replay is None or r["index"] in done:
                continue
            label, cfg = replay
            status, out, secs = run_one(args.cleave, mpiexec, r["world"], cfg, r["steps"], args.timeout)
            outcome, detail = classify(status, out, r["doc_refusals"])
            log.write(json.dumps({"index": r["index"], "label": label, "replay_outcome": outcome,
                                  "replay_detail": detail}) + "\n")
            log.flush()
            print(f"{r['index']:4d} {r['outcome']} -> {label.split(':')[0]} replay {outcome}: {detail}", flush=True)


# --smoke: draws of the default seed that together cover what no other test composes (chosen from
# RESULTS-2026-12-01-h-layout-sweep.md's run): each must pass `cleave verify`, or be refused as the docs say it is.
# 425 moe cp2 ring x pp2 dualpipev + moe_a2a_overlap, ep2, ZeRO-1 outside deterministic mode; 72 moe cp2 all_to_all
# ep2 ZeRO-3 AdamW; 140 moe tp2 sp x pp2 1f1b ZeRO-2, gated shared experts, sigmoid router; 47 llama sliding window
# pp2 zb_h1 x dp2 ZeRO-1; 322 gpt pp4 auto ZeRO-3 AdamW; 256 moe pp3 interleaved_1f1b; 51 moe dp4 ep4 ZeRO-3 AdamW;
# 246 gpt pp2 gpipe ZeRO-3 full recomputation; 269 llama pp2 zb_v AdamW; 108 moe pp2 zb_h2 ZeRO-2 per micro-batch;
# 395 llama tp4 sp ZeRO-3; 112 cp4 ring. Refused: 338 (12 stages of 6 blocks), 87 (dualpipev with 1 micro-batch).
SMOKE_PASS = [425, 72, 140, 47, 322, 256, 51, 246, 269, 108, 395, 112]
SMOKE_REFUSED = [338, 87]


def smoke(args):
    """The fixed handful (ctest e2e_layout_sweep_smoke): exit 1 unless each SMOKE_PASS draw passes and each
    SMOKE_REFUSED draw is refused with a message naming a config key, as the docs' rules expect."""
    mpiexec = args.mpiexec.split()
    bad = []
    for i in SMOKE_PASS + SMOKE_REFUSED:
        world, cfg, steps = draw(SEED, i)
        expected = doc_refusals(world, cfg)
        status, out, secs = run_one(args.cleave, mpiexec, world, cfg, steps, args.timeout)
        outcome, detail = classify(status, out, expected)
        want = "pass" if i in SMOKE_PASS else "refused"
        print(f"{'ok  ' if outcome == want else 'FAIL'} draw {i} np{world} {outcome} ({secs:.1f}s): {detail}\n"
              f"     {' '.join(features(world, cfg))}", flush=True)
        if outcome != want:
            bad.append(i)
            print(out[-3000:])
    print(f"{len(SMOKE_PASS) + len(SMOKE_REFUSED) - len(bad)} of {len(SMOKE_PASS) + len(SMOKE_REFUSED)} draws as "
          f"expected" + (f"; not: {bad}" if bad else ""))
    return 1 if bad else 0


def summarize(path):
    rows = [json.loads(l) for l in open(path)]
    for r in rows:  # the doc rules as they are now, so a corrected rule applies to rows already run
        r["doc_refusals"] = doc_refusals(r["world"], r["config"])
        base = r["outcome"].split("(")[0]
        if base == "refused":
            notes = ([] if r["doc_refusals"] else ["unexpected"]) + (["unclear"] if "unclear" in r["outcome"] else [])
            r["outcome"] = base + ("(" + ",".join(notes) + ")" if notes else "")
        elif base == "pass":
            r["outcome"] = "pass(doc-refusal-expected)" if r["doc_refusals"] else "pass"
    if os.path.exists(path + ".triage.jsonl"):
        sgd = {t["index"]: t for t in map(json.loads, open(path + ".triage.jsonl"))}
        for r in rows:
            t = sgd.get(r["index"])
            if t and r["outcome"] in ("mismatch", "routing") and t["replay_outcome"] == "pass":
                r["outcome"] = f"{r['outcome']}({t['label']})"
                r["detail"] += f" | replay: {t['replay_detail']}"
    outcomes = collections.Counter(r["outcome"].split("(")[0] for r in rows)
    print(f"{len(rows)} draws: " + ", ".join(f"{k} {v}" for k, v in sorted(outcomes.items())))
    print(f"run time: {sum(r['seconds'] for r in rows) / 60:.1f} min\n")
    per = collections.defaultdict(collections.Counter)
    for r in rows:
        for f in features(r["world"], r["config"]):
            per[f][r["outcome"].split("(")[0]] += 1
    print("| feature | draws | pass | refused | mismatch | routing | crash | hang |\n|---|---|---|---|---|---|---|---|")
    for f in sorted(per):
        c = per[f]
        print(f"| {f} | {sum(c.values())} | {c['pass']} | {c['refused']} | {c['mismatch']} | {c['routing']} | {c['crash']} | "
              f"{c['hang']} |")
    print("\nrefusal messages (count, first draw):")
    msgs = collections.OrderedDict()
    for r in rows:
        if r["outcome"].startswith("refused"):
            key = re.sub(r"\d+", "N", r["detail"])[:160]
            msgs.setdefault(key, [0, r])[0] += 1
    for key, (n, r) in msgs.items():
        print(f"- {n} x (draw {r['index']}, {r['outcome']}): {r['detail']}")
    print("\nnot passed and not refused, or refused against the docs:")
    for r in rows:
        o = r["outcome"]
        if not (o == "pass" or o == "refused"):
            print(f"- draw {r['index']} np{r['world']} {o}: {r['detail']}\n    {' '.join(features(r['world'], r['config']))}"
                  f"\n    doc rules: {r['doc_refusals']}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cleave", default="build/bin/cleave")
    ap.add_argument("--mpiexec", default="mpiexec --allow-run-as-root --oversubscribe")
    ap.add_argument("--seed", type=int, default=SEED)
    ap.add_argument("--start", type=int, default=0)
    ap.add_argument("--count", type=int, default=200)
    ap.add_argument("--only", type=int, help="replay one draw")
    ap.add_argument("--override", action="append", default=[], metavar="KEY=JSON",
                    help="change a key of every draw (null removes it), to reduce a failure")
    ap.add_argument("--steps", type=int, default=0, help="steps instead of the draw's own")
    ap.add_argument("--timeout", type=float, default=300, help="seconds per draw before it counts as a hang")
    ap.add_argument("--budget", type=float, default=0, help="stop starting draws after this many seconds (0: none)")
    ap.add_argument("--out", default="layout_sweep.jsonl")
    ap.add_argument("--keep-logs", action="store_true", help="write each failed or refused draw's output beside --out")
    ap.add_argument("--smoke", action="store_true", help="run the fixed handful of draws the test suite runs")
    ap.add_argument("--print", action="store_true", help="print the draws' configs and exit (no runs)")
    ap.add_argument("--summary", metavar="JSONL", help="summarize a sweep's rows and exit")
    ap.add_argument("--triage", metavar="JSONL", help="replay a sweep's mismatches as triage_replay says and exit")
    args = ap.parse_args()
    if args.summary:
        return summarize(args.summary)
    if args.print:
        for i in ([args.only] if args.only is not None else range(args.start, args.start + args.count)):
            world, cfg, steps = draw(args.seed, i)
            print(i, world, steps, json.dumps(cfg), doc_refusals(world, cfg))
        return
    args.cleave = os.path.realpath(args.cleave)
    if not os.access(args.cleave, os.X_OK):
        sys.exit(f"layout_sweep: --cleave {args.cleave} is not an executable; build it first (target cleave)")
    if args.triage:
        return triage(args)
    if args.smoke:
        sys.exit(smoke(args))
    sweep(args)


if __name__ == "__main__":
    main()
