#!/usr/bin/env python3
"""Held-out published training runs re-simulated by `cleave simulate --config` (issue 38 part 3).

Each table in benchmarks/planner/held_out/*.tsv is one publication: '#' lines cite it, then one row per run with
the run's own model, layout, schedule (auto:Kp = the zero-bubble paper's searched ZB-Kp, Cleave's automatic
scheduler under the paper's memory limit: auto_schedule_keys; its steps overlapped, `simulate
--optimizer-post-validation`, as the paper's ZB runs used post-validation), batch, micro-batch, recomputation (none, selective, full;
selective:torchtitan_op = torchtitan's per-op policy, `simulate --selective-recompute torchtitan_op`;
selective:torchtitan_layer_N = torchtitan's selective layer AC, every N-th block fully recomputed: no Cleave setting,
the row printed as not modelled), ZeRO stage, the attention kernel it
used (`simulate --attention`: memory_efficient, probabilities, probabilities_dropout; memory_efficient:NAME also
names the fused kernel's family, `simulate --attention-kernel NAME`: cudnn, flash3, flash2, priced at that kernel's
published per-pass rates, the profile's attention_rates; probabilities_dropout:pytorch prices the unfused scores,
softmax and products at PyTorch standard attention's published rates), the kernels it launched beyond
Cleave's own (kernels: ce_f32 = `simulate --cross-entropy float32`, dropout = `--hidden-dropout`, emb_grad =
`--dense-embedding-grad`, ce_torch_f32 = `--cross-entropy torch_float32`, rmsnorm_torch = `--norm torch_unfused`,
fsdp2_copy = `--fsdp2-copy-out`),
what it overlapped with
compute (overlap: dp = `simulate --overlap-grad-reduce`, tp = `--tp-comm-overlap`, dp+tp, - none), the dtype its
data-parallel gradient reduction carried (grad_wire: f32, or 16 = the 16-bit parameter dtype, fp16 or bf16: config
parallel.grad_reduce_dtype bf16, 2 bytes an element), whether its
pipeline point-to-point blocked the rank (p2p: blocking = `simulate --blocking-p2p`, async), how it split its
layers over the pipeline (split: megatron, zb or cost; blocks_per_stage below) and the hardware profile to price it
with. For every row this writes the run's config, simulates one step on the profile and converts the
step time into the publication's own metric:

  tflops_sc21      teraFLOP/s per GPU, FLOPs by Narayanan et al. (SC'21) equation 3 (recomputation included):
                   96 B s l h^2 (1 + s / (6h) + V / (16 l h))
  tflops_model     teraFLOP/s per GPU, model FLOPs (Korthikanti et al. 2022): 72 B s l h^2 (1 + s / (6h) + V / (12 l h))
  samples_per_gpu  samples per second per GPU
  tokens_per_gpu   tokens per second per GPU

and prints predicted, published, ratio (predicted / published) and the row's note (what the run used that Cleave
does not model, what the publication does not say). The published figures are never read by the cost model:
nothing here is fitted (docs/planner.md, "Held-out runs").

Invariant: every row is printed, simulated or not: a row Cleave refuses keeps its line with the reason.
Usage: held_out.py --cleave BIN [--tables DIR] [--smoke] [--markdown] [--only PREFIX] [--breakdown]
"""
import argparse
import glob
import json
import os
import statistics
import subprocess
import sys
import tempfile

COLUMNS = ("id profile family vocab d_model n_layers n_heads n_kv_heads ffn seq tied tp pp gpus schedule v batch micro "
           "recompute zero sp scatter attention kernels overlap grad_wire p2p split metric published note").split()
# The kernels column: what the run launched beyond Cleave's own kernels ('+'-joined; '-' none):
#   ce_f32   Megatron-LM's unfused vocab-parallel cross-entropy over f32 logits (`simulate --cross-entropy float32`)
#   dropout  Megatron-LM's hidden dropout on the residual branches and the embedding (`simulate --hidden-dropout`)
#   emb_grad PyTorch's dense embedding gradient added into Megatron-LM's f32 main gradient (`--dense-embedding-grad`)
#   ce_torch_f32  PyTorch's F.cross_entropy over logits cast to f32 (torchtitan; `--cross-entropy torch_float32`)
#   rmsnorm_torch PyTorch's eager RMSNorm, one kernel per op (torchtitan's norm_type rmsnorm; `--norm torch_unfused`)
#   fsdp2_copy    PyTorch FSDP2's all-gather copy-out before each block's F and I (torchtitan; `--fsdp2-copy-out`)
KERNELS = {"ce_f32": ["--cross-entropy", "float32"], "dropout": ["--hidden-dropout"],
           "emb_grad": ["--dense-embedding-grad"], "ce_torch_f32": ["--cross-entropy", "torch_float32"],
           "rmsnorm_torch": ["--norm", "torch_unfused"], "fsdp2_copy": ["--fsdp2-copy-out"]}
SMOKE_ID = "sc21-1.7B"
# --breakdown's columns: groups of `simulate --json`'s breakdown_s terms (docs/planner.md, "The step, term by term").
BREAKDOWN = (("forward", "input_grad", "weight_grad"), ("elementwise",), ("kernel_launch",), ("recompute",),
             ("tensor_parallel", "context_parallel", "expert_all_to_all", "count_exchange"), ("data_parallel", "zero_gather"),
             ("optimizer",), ("point_to_point", "point_to_point_wait"), ("bubble",))
BREAKDOWN_HEAD = "GEMM F+I+W/elementwise/launch/recompute/tp+cp/dp+zero/optimizer/p2p/bubble %"
# The compute terms (the first four groups): --breakdown also prints how many times slower they would have to be for
# the step to match the published one with every other term as predicted (published step = predicted step x ratio,
# every metric being inversely proportional to the step): (step x ratio - (step - compute)) / compute. The idle terms
# are held as predicted too, so on a pipelined row (whose bubble grows with its compute) it is an upper bound.
COMPUTE_TERMS = ("forward", "input_grad", "weight_grad", "elementwise", "kernel_launch", "recompute")
COMPUTE_HEAD = "compute x to match"


def read_table(path):
    """(citation lines, rows as dicts) of one table file; raises ValueError naming the file and line."""
    cite, rows, header = [], [], None
    with open(path) as f:
        for number, line in enumerate(f, 1):
            line = line.rstrip("\n")
            if not line.strip():
                continue
            if line.startswith("#"):
                cite.append(line[1:].strip())
                continue
            fields = line.split("\t")
            if header is None:
                if fields != COLUMNS:
                    raise ValueError(f"{path}:{number}: header must be the columns {' '.join(COLUMNS)}")
                header = fields
                continue
            if len(fields) != len(COLUMNS):
                raise ValueError(f"{path}:{number}: {len(fields)} fields, expected {len(COLUMNS)} ({' '.join(COLUMNS)})")
            rows.append(dict(zip(COLUMNS, fields), table=os.path.basename(path)))
    return cite, rows


def blocks_per_stage(row):
    """The run's own split of its blocks over the pp x v pipeline chunks, in model order (None: Cleave's partitioner).
    Cleave's GPT and Llama are [embedding, L transformer blocks, final norm, head, loss] (L + 4 blocks).
      megatron  Megatron-LM: L / (pp v) layers per chunk, the embedding on the first, norm + head + loss on the last
      zb        the zero-bubble paper: the embedding and the head each count as a layer, (L + 2) / (pp v) per chunk
      cost      Cleave's partitioner (balanced by the cost model)"""
    split, chunks, layers = row["split"], int(row["pp"]) * int(row["v"]), int(row["n_layers"])
    if split == "cost" or chunks == 1:
        return None
    if split == "megatron":
        if layers % chunks:
            raise ValueError(f"{row['table']}: row {row['id']}: split megatron needs n_layers {layers} divisible by "
                             f"pp x v = {chunks}")
        counts = [layers // chunks] * chunks
        counts[0] += 1
        counts[-1] += 3
        return counts
    if split == "zb":
        if (layers + 2) % chunks:
            raise ValueError(f"{row['table']}: row {row['id']}: split zb needs n_layers + 2 = {layers + 2} divisible by "
                             f"pp x v = {chunks}")
        per = (layers + 2) // chunks
        counts = [per] * chunks
        counts[-1] = per - 1 + 3
        return counts
    raise ValueError(f"{row['table']}: row {row['id']}: split '{split}' is not cost, megatron or zb")


def auto_schedule_keys(row):
    """The config keys of a schedule column 'auto:Kp': the zero-bubble paper's searched schedule ZB-Kp (K = 1, 2), run
    as Cleave's automatic scheduler under the paper's memory limit (Qi et al., section 3.1 and Table 1; the fork's
    --zero-bubble-max-pending-backward K x pp, its limit K x pp x M_F with M_F one micro-batch's activations on a
    stage): K x pp stashes per rank, a stash weighing M_W / M_B = 32h / (34h + 5as) of itself between its I and its
    W (the paper's Table 1; the fork measures it, its values are not published; h d_model, a heads, s sequence), the search minimising the longest per-rank span as the paper's heuristic does. {} for any
    other schedule. simulate() adds --auto-schedule-priced: the search reads the estimate's priced F, I, W (the
    median over the stages, as the fork's scheduler takes the median of its profiled times) and P2P transfers."""
    name, _, factor = row["schedule"].partition(":")
    if name != "auto" or not factor:
        return {}
    if not (factor.endswith("p") and factor[:-1].isdigit() and int(factor[:-1]) >= 1):
        raise ValueError(f"{row['table']}: row {row['id']}: schedule '{row['schedule']}' is not auto:Kp (K an "
                         "integer >= 1: K x pp micro-batches of activation memory, the paper's ZB-Kp)")
    h, a, seq = (float(row[k]) for k in ("d_model", "n_heads", "seq"))
    return {"schedule": "auto", "auto_schedule_memory_limit": int(factor[:-1]) * int(row["pp"]),
            "auto_schedule_weight_stash_fraction": 32 * h / (34 * h + 5 * a * seq), "auto_schedule_objective": "span"}


def config_of(row):
    model = {"type": row["family"], "vocab_size": int(row["vocab"]), "d_model": int(row["d_model"]),
             "n_layers": int(row["n_layers"]), "n_heads": int(row["n_heads"]), "seq_len": int(row["seq"])}
    if row["family"] == "llama":
        model["n_kv_heads"] = int(row["n_kv_heads"])
        model["ffn_hidden_size"] = int(row["ffn"])
    elif row["ffn"] != "-":
        model["d_ff"] = int(row["ffn"])
    if row["tied"] != "-":  # the LM head shares the embedding table (1) or not (0); '-': the family's default
        if row["tied"] not in ("0", "1"):
            raise ValueError(f"{row['table']}: row {row['id']}: tied '{row['tied']}' is not 0, 1 or -")
        model["tie_embeddings"] = row["tied"] == "1"
    parallel = {"tensor_model_parallel_size": int(row["tp"]), "pipeline_model_parallel_size": int(row["pp"]),
                "schedule": row["schedule"], "virtual_pipeline_stages": int(row["v"]), "sequence_parallel": row["sp"] == "1"}
    parallel.update(auto_schedule_keys(row))
    if row["grad_wire"] not in ("f32", "16"):
        raise ValueError(f"{row['table']}: row {row['id']}: grad_wire '{row['grad_wire']}' is not f32 or 16 (the dtype "
                         "the data-parallel gradient reduction carried)")
    if row["grad_wire"] == "16":  # 2 bytes an element on the wire: the same for fp16 and bf16
        parallel["grad_reduce_dtype"] = "bf16"
    split = blocks_per_stage(row)
    if split is not None:
        parallel["partition"] = {"method": "manual", "blocks_per_stage": split}
    return {
        "model": model,
        "parallel": parallel,
        "batch": {"global_batch_size": int(row["batch"]), "micro_batch_size": int(row["micro"])},
        "optimizer": {"type": "adamw", "zero_stage": int(row["zero"])},
        "train": {"recompute": row["recompute"].partition(":")[0]},
        "device": {"type": "cpu", "precision": "bf16"},
        "data": {"type": "synthetic"},
    }


def metric(row, step_s):
    B, s, l, h = (float(row[k]) for k in ("batch", "seq", "n_layers", "d_model"))
    V, gpus = float(row["vocab"]), float(row["gpus"])
    m = row["metric"]
    if m == "tflops_sc21":
        return 96 * B * s * l * h * h * (1 + s / (6 * h) + V / (16 * l * h)) / step_s / gpus / 1e12
    if m == "tflops_model":
        return 72 * B * s * l * h * h * (1 + s / (6 * h) + V / (12 * l * h)) / step_s / gpus / 1e12
    if m == "samples_per_gpu":
        return B / step_s / gpus
    if m == "tokens_per_gpu":
        return B * s / step_s / gpus
    raise ValueError(f"{row['table']}: row {row['id']}: unknown metric '{m}' (tflops_sc21, tflops_model, "
                     "samples_per_gpu, tokens_per_gpu)")


def not_modelled_recompute(row):
    """The reason a row's recomputation has no Cleave setting ('' when it has one). selective:torchtitan_layer_N is
    torchtitan's selective layer AC (parallelize_llama.py checkpoint_wrapper: every N-th block fully recomputed, the
    others keeping all their activations); train.recompute is one mode for every block, so such a row is kept and
    printed as not modelled, never priced as another mode."""
    recompute, _, policy = row["recompute"].partition(":")
    if recompute != "selective" or not policy.startswith("torchtitan_layer_"):
        return ""
    every = policy[len("torchtitan_layer_"):]
    if not (every.isdigit() and int(every) >= 1):
        raise ValueError(f"{row['table']}: row {row['id']}: recompute '{row['recompute']}' needs a block interval "
                         "N >= 1 (selective:torchtitan_layer_N)")
    return (f"not modelled: selective layer AC (one block in every {every} fully recomputed, the others none) has no "
            "Cleave setting (train.recompute is one mode for all blocks)")


def simulate(row, cleave, profiles, work):
    cfg = os.path.join(work, row["id"] + ".json")
    with open(cfg, "w") as f:
        json.dump(config_of(row), f)
    cmd = [cleave, "simulate", "--config", cfg, "--world", row["gpus"], "--profile",
           os.path.join(profiles, row["profile"] + ".json"), "--json"]
    if row["scatter"] == "1":
        cmd.append("--scatter-gather")
    if auto_schedule_keys(row):  # the paper's heuristic reads profiled F, B, W and P2P: the search reads the prices
        cmd.append("--auto-schedule-priced")
        # The fork passes --enable-optimizer-post-validation with --enable-zero-bubble in fp16/bf16
        # (examples/pretrain_zero_bubble.sh at 3a91d0c8), so its ZB-Kp steps overlap: a step is the longest per-rank
        # span (the paper's "cost"), not the makespan. Its 1F1B and 1F1B-I rows run without it.
        cmd.append("--optimizer-post-validation")
    # The attention kernel the run used (memory_efficient, probabilities...), and for a fused one its family.
    kind, _, family = row["attention"].partition(":")
    cmd += ["--attention", kind]
    if family:
        cmd += ["--attention-kernel", family]
    # The recomputation (none, selective, full), and for selective what it reruns: selective:torchtitan_op is
    # torchtitan's per-op policy (`simulate --selective-recompute torchtitan_op`); plain selective the attention core.
    recompute, _, policy = row["recompute"].partition(":")
    layer_ac = not_modelled_recompute(row)
    if layer_ac:
        return None, layer_ac
    if policy:
        if recompute != "selective" or policy not in ("attention", "torchtitan_op"):
            raise ValueError(f"{row['table']}: row {row['id']}: recompute '{row['recompute']}' is not none, full, "
                             "selective or selective:attention|torchtitan_op")
        cmd += ["--selective-recompute", policy]
    kernels = set(row["kernels"].split("+")) - {"-"}
    if kernels - set(KERNELS):
        raise ValueError(f"{row['table']}: row {row['id']}: kernels '{row['kernels']}' is not '-' or a '+'-join of "
                         f"{', '.join(sorted(KERNELS))}")
    for k in sorted(kernels):
        cmd += KERNELS[k]
    # What the run overlapped with compute: dp (the gradient reduction and ZeRO's parameter gather), tp (sequence
    # parallelism's collectives under the GEMMs), dp+tp; '-' none.
    overlap = set(row["overlap"].split("+")) - {"-"}
    if overlap - {"dp", "tp"}:
        raise ValueError(f"{row['table']}: row {row['id']}: overlap '{row['overlap']}' is not -, dp, tp or dp+tp")
    if "dp" in overlap:
        cmd.append("--overlap-grad-reduce")
    if "tp" in overlap:
        cmd.append("--tp-comm-overlap")
    # Whether the run's pipeline sends and receives held the rank until done (Megatron-LM of 2021: batch_isend_irecv,
    # wait, torch.cuda.synchronize) or ran beside its compute (the engine's, and overlapped p2p).
    if row["p2p"] not in ("async", "blocking"):
        raise ValueError(f"{row['table']}: row {row['id']}: p2p '{row['p2p']}' is not async or blocking")
    if row["p2p"] == "blocking":
        cmd.append("--blocking-p2p")
    # ZeRO-1/2 here is Megatron-LM's distributed optimizer (Megatron-Core's rows, --use-distributed-optimizer), which
    # all-gathers the bf16 model parameters after the step, not the f32 master values the engine gathers.
    if row["zero"] in ("1", "2"):
        cmd += ["--param-gather-dtype", "bf16"]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode == 1 and done.stdout.lstrip().startswith("{"):  # simulated, over the memory cap: keep the row
        return json.loads(done.stdout), ""
    if done.returncode != 0:
        return None, (done.stderr.strip().splitlines() or ["cleave simulate failed"])[-1]
    return json.loads(done.stdout), ""


def main():
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cleave", required=True, help="the cleave binary")
    ap.add_argument("--tables", default=os.path.join(root, "benchmarks/planner/held_out"))
    ap.add_argument("--profiles", default=os.path.join(root, "profiles"))
    ap.add_argument("--smoke", action="store_true", help=f"one row ({SMOKE_ID}); fails unless it simulates and its "
                    "ratio is finite and within 0.5-2, or unless every row of every table makes a config")
    ap.add_argument("--only", default="", help="rows whose id starts with this")
    ap.add_argument("--markdown", action="store_true", help="print a markdown table")
    ap.add_argument("--breakdown", action="store_true", help="add each row's step breakdown (% of the step: "
                    + BREAKDOWN_HEAD.rstrip(" %") + ")")
    args = ap.parse_args()

    tables = sorted(glob.glob(os.path.join(args.tables, "*.tsv")))
    if not tables:
        sys.exit(f"held_out.py: no tables (*.tsv) in {args.tables}")
    rows, cites = [], {}
    for t in tables:
        cite, r = read_table(t)
        cites[os.path.basename(t)] = cite
        rows += r
    if args.smoke:  # every row of every table must still describe a config, or name why it cannot
        for r in rows:
            if not not_modelled_recompute(r):
                config_of(r)
        rows = [r for r in rows if r["id"] == SMOKE_ID]
    elif args.only:
        rows = [r for r in rows if r["id"].startswith(args.only)]
    if not rows:
        sys.exit("held_out.py: no row selected")

    results = []
    with tempfile.TemporaryDirectory() as work:
        for row in rows:
            out, why = simulate(row, args.cleave, args.profiles, work)
            published = float(row["published"])
            if out is None or out.get("step_s", 0) <= 0:
                why = (why or "no step time") + ("; " + row["note"] if row["note"] != "-" else "")
                results.append((row, None, published, None, why, out))
                continue
            predicted = metric(row, out["step_s"])
            note = row["note"] if row["note"] != "-" else ""
            if not out.get("fits", True):
                note = (note + "; " if note else "") + "over the profile's memory in Cleave's plan"
            results.append((row, predicted, published, predicted / published, note, out))

    sep = " | " if args.markdown else "  "
    head = ["run", "layout", "schedule", "metric", "predicted", "published", "ratio"]
    if args.breakdown:
        head += [BREAKDOWN_HEAD, COMPUTE_HEAD]
    head.append("note")
    if args.markdown:
        print("| " + " | ".join(head) + " |")
        print("|" + "|".join("---:" if h in ("predicted", "published", "ratio", COMPUTE_HEAD) else "---" for h in head) + "|")
    else:
        print(sep.join(head))
    for row, predicted, published, ratio, note, out in results:
        layout = f"tp{row['tp']} pp{row['pp']} dp{int(row['gpus']) // (int(row['tp']) * int(row['pp']))}"
        schedule = row["schedule"] + (f" v{row['v']}" if row["v"] != "1" else "") + f" mb{row['micro']}"
        cells = [row["id"], layout, schedule, row["metric"],
                 f"{predicted:.3g}" if predicted is not None else "-", f"{published:g}",
                 f"{ratio:.3f}" if ratio is not None else "not modelled"]
        if args.breakdown:
            if out and "breakdown_s" in out and out["step_s"] > 0:
                b = out["breakdown_s"]
                parts = [sum(b.get(k, 0) for k in group) for group in BREAKDOWN]
                cells.append("/".join(f"{100 * x / out['step_s']:.0f}" for x in parts))
                compute = sum(b.get(k, 0) for k in COMPUTE_TERMS)
                step = out["step_s"]
                cells.append(f"{(step * ratio - (step - compute)) / compute:.2f}" if compute > 0 and ratio else "-")
            else:
                cells += ["-", "-"]
        cells.append(note)
        print(("| " if args.markdown else "") + sep.join(cells) + (" |" if args.markdown else ""))

    ratios = [r[3] for r in results if r[3] is not None]
    if ratios:
        errors = sorted(abs(x - 1) for x in ratios)
        within = sum(e <= 0.05 for e in errors)
        print(f"\n{len(ratios)} of {len(results)} rows simulated; |ratio - 1|: median {100 * statistics.median(errors):.1f}%, "
              f"worst {100 * errors[-1]:.1f}%, within 5%: {within} of {len(ratios)}")
        for table in sorted({r[0]["table"] for r in results}):
            e = sorted(abs(r[3] - 1) for r in results if r[0]["table"] == table and r[3] is not None)
            if e:
                print(f"  {table}: median {100 * statistics.median(e):.1f}%, worst {100 * e[-1]:.1f}% ({len(e)} rows)")
    zb = ranking_check(results)
    if zb:
        print(zb)
    if args.smoke:
        row, predicted, published, ratio, note, _ = results[0]
        if ratio is None or not (0.5 <= ratio <= 2.0):
            sys.exit(f"held_out.py --smoke: {row['id']} predicted {predicted} against published {published}: ratio "
                     f"{ratio} outside 0.5-2 ({note})")


def ranking_check(results):
    """Whether each zero-bubble setting ranks its schedules as the paper does (by samples per GPU per second)."""
    groups = {}
    for row, predicted, published, ratio, _, _ in results:
        if row["table"].startswith("zero_bubble") and predicted is not None:
            key = row["id"].rsplit("-", 1)[0]
            groups.setdefault(key, []).append((row["id"].rsplit("-", 1)[1], predicted, published))
    if not groups:
        return ""
    lines, kept, kept3 = [], 0, 0
    for key, g in groups.items():
        order_pred = [s for s, _, _ in sorted(g, key=lambda x: -x[1])]
        order_pub = [s for s, _, _ in sorted(g, key=lambda x: -x[2])]
        kept += order_pred == order_pub
        three = ("1f1b", "zb1p", "zb2p")  # the paper's 1F1B and its two zero-bubble schedules, without 1F1B-I
        kept3 += [s for s in order_pred if s in three] == [s for s in order_pub if s in three]
        by = {s: (p, q) for s, p, q in g}
        speedup = ""
        if all(s in by for s in three):
            speedup = "; over 1F1B: " + ", ".join(f"{s} {by[s][0] / by['1f1b'][0]:.3f} (published {by[s][1] / by['1f1b'][1]:.3f})"
                                                  for s in ("zb1p", "zb2p"))
        lines.append(f"  {key}: published {' > '.join(order_pub)}; predicted {' > '.join(order_pred)}{speedup}")
    return (f"zero-bubble schedule ranking: 1F1B, ZB-1p, ZB-2p kept in {kept3} of {len(groups)} settings; with 1F1B-I "
            f"in {kept} of {len(groups)}:\n" + "\n".join(lines))


if __name__ == "__main__":
    main()
