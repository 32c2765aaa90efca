#!/usr/bin/env python3
"""The imbalance benchmark's oracle (issue 36 part 5): for a named routing workload, the exact rows every
expert-parallel all-to-all must move, computed from the workload's definition alone (Python standard library
only; it shares no code with the engine, whose routing is layers/moe/forced_routing.cpp).

Workloads (model.forced_routing; docs/models.md, "Forced routing"): token n of a micro-batch (n in [0, N),
N = micro_batch_size x seq_len / cp tokens on a rank), slot j in [0, k), optimizer step s (0-based, the trainer's), E experts,
ep ranks (rank q holds experts [q E/ep, (q+1) E/ep)):
  h(s, n, j)  = splitmix64((s << 40) ^ (n << 8) ^ j)             (64-bit, wrapping)
  uniform     slot j: h mod E
  zipf        slot j: the expert e whose cumulative weight first exceeds h mod W, weight_e = 2^20 // (e + 1)
  one_expert  slot j: expert j (every token to experts 0 .. k-1: all rows to rank 0)
  empty_rank:P slot j: h mod (E - E/P) (the last E/P experts are never chosen: one empty rank at ep = P;
              "empty_rank" is P = 2)
  moving_hot  slot 0: expert s mod E; slots j > 0: h mod E
A candidate already taken by an earlier slot of the token moves to the next expert (+1, wrapping within the
workload's range) until it is free. The routing depends only on (s, n, j), so every micro-batch of a step and
every source rank route alike; the rows from rank q to rank r per micro-batch are then
  rows[q][r] = #{(n, j): expert(s, n, j) // (E/ep) == r}   for every q,
and per moe block and micro-batch the dispatch sends rows[q][r] rows of D values from q to r (r != q), the
combine sends them back, and the backward repeats both (gradients). Bytes = rows x D x dtype bytes.

Usage: oracle.py --workload NAME[:P] --experts E --top-k K --ep EP --tokens N --d-model D [--dtype-bytes 4]
                 [--steps S] [--micro-batches M] [--blocks L] [--json]
Prints, per step, the matrix rows[q][r] of one dispatch and the totals per rank over the step.
"""
import argparse
import json
import sys

MASK = (1 << 64) - 1
WORKLOADS = ("uniform", "zipf", "one_expert", "empty_rank", "moving_hot")


def splitmix64(x):
    x = (x + 0x9E3779B97F4A7C15) & MASK
    z = x
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
    return z ^ (z >> 31)


def h(step, token, slot):
    return splitmix64(((step << 40) ^ (token << 8) ^ slot) & MASK)


def zipf_pick(value, experts):
    weights = [(1 << 20) // (e + 1) for e in range(experts)]
    r = value % sum(weights)
    acc = 0
    for e, w in enumerate(weights):
        acc += w
        if r < acc:
            return e
    raise AssertionError("unreachable")


def parse_workload(text):
    """("empty_rank", P) for "empty_rank:P"; (name, 2) otherwise."""
    name, _, arg = text.partition(":")
    if name not in WORKLOADS or (arg and name != "empty_rank"):
        raise ValueError(f"unknown workload {text!r}; use one of {', '.join(WORKLOADS)} (empty_rank:P)")
    return name, int(arg) if arg else 2


def token_experts(workload, step, token, experts, top_k, parts=2):
    """The k experts of one token, in slot order."""
    span = experts - experts // parts if workload == "empty_rank" else experts
    chosen = []
    for j in range(top_k):
        if workload == "uniform":
            c = h(step, token, j) % experts
        elif workload == "zipf":
            c = zipf_pick(h(step, token, j), experts)
        elif workload == "one_expert":
            c = j
        elif workload == "empty_rank":
            c = h(step, token, j) % span
        elif workload == "moving_hot":
            c = step % experts if j == 0 else h(step, token, j) % experts
        else:
            raise ValueError(workload)
        while c in chosen:
            c = (c + 1) % span
        chosen.append(c)
    return chosen


def dispatch_rows(workload, step, tokens, experts, top_k, ep):
    """rows[q][r] of one dispatch of one micro-batch (identical for every source rank q)."""
    name, parts = parse_workload(workload)
    per_rank = experts // ep
    row = [0] * ep
    for n in range(tokens):
        for e in token_experts(name, step, n, experts, top_k, parts):
            row[e // per_rank] += 1
    return [list(row) for _ in range(ep)]


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--workload", required=True, help="uniform, zipf, one_expert, empty_rank[:P], moving_hot")
    p.add_argument("--experts", type=int, required=True)
    p.add_argument("--top-k", type=int, required=True)
    p.add_argument("--ep", type=int, required=True)
    p.add_argument("--tokens", type=int, required=True, help="tokens of one micro-batch on one rank")
    p.add_argument("--d-model", type=int, required=True)
    p.add_argument("--dtype-bytes", type=int, default=4)
    p.add_argument("--first-step", type=int, default=0, help="the first optimizer step (0-based)")
    p.add_argument("--steps", type=int, default=1)
    p.add_argument("--micro-batches", type=int, default=1, help="micro-batches per step on each rank")
    p.add_argument("--blocks", type=int, default=1, help="moe blocks")
    p.add_argument("--json", action="store_true")
    a = p.parse_args(argv)
    name, parts = parse_workload(a.workload)
    if a.experts % a.ep or a.top_k > a.experts or (name == "empty_rank" and (a.experts % parts or a.experts - a.experts // parts < a.top_k)):
        sys.exit(f"oracle: workload {a.workload} with {a.experts} experts, top_k {a.top_k}, ep {a.ep} is not defined")
    out = []
    for s in range(a.first_step, a.first_step + a.steps):
        rows = dispatch_rows(a.workload, s, a.tokens, a.experts, a.top_k, a.ep)
        sent = [sum(rows[q][r] for r in range(a.ep) if r != q) for q in range(a.ep)]
        received = [sum(rows[q][r] for q in range(a.ep) if q != r) for r in range(a.ep)]
        computed = [sum(rows[q][r] for q in range(a.ep)) for r in range(a.ep)]
        mean = sum(computed) / a.ep
        per_step = a.micro_batches * a.blocks  # dispatches per step (and as many combines)
        out.append({
            "step": s,
            "dispatch_rows": rows,
            "sent_rows": sent,
            "received_rows": received,
            "computed_rows": computed,
            "imbalance": max(computed) / mean if mean > 0 else 0.0,
            # Per rank over the step: dispatch + combine, forward and backward (4 all-to-alls per block and
            # micro-batch), bytes leaving the rank.
            "sent_bytes_per_step": [per_step * 2 * (sent[q] + received[q]) * a.d_model * a.dtype_bytes for q in range(a.ep)],
        })
    if a.json:
        print(json.dumps(out))
    else:
        for o in out:
            print(f"step {o['step']}: dispatch rows {o['dispatch_rows']} computed {o['computed_rows']} "
                  f"imbalance {o['imbalance']:.3f} bytes sent per rank per step {o['sent_bytes_per_step']}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
