#!/usr/bin/env python3
"""Does the way Megatron-Core's interleaved 1F1B posts and waits on its point-to-point cost anything over
Cleave's asynchronous rule? (benchmarks/planner/RESULTS.md, "1F1B-I: the fork's overlapped point-to-point").

The zero-bubble paper's 1F1B-I rows ran Megatron-Core's forward_backward_pipelining_with_interleaving with
overlap_p2p_comm on (sail-sg/zero-bubble-pipeline-parallelism at 3a91d0c8, megatron/core/pipeline_parallel/
schedules.py and p2p_communication.py). Per rank, on the GPU stream, that code does:
  - before the loop, a blocking receive of the first forward's input (not on the first rank);
  - warm-up forward k: wait for the previous forward's handles, F, then post {send F's output, receive the next
    forward's input}; after the last warm-up forward also post {receive the first backward's gradient};
  - steady state: wait forward handles, F, post {send, receive}; wait backward handles, B, post {send the input
    gradient, receive the next backward's gradient};
  - cool-down: B, then {send, receive} waited at once (send_backward_recv_backward without overlap).
A wait holds the stream until every transfer of that post is done; NCCL pairs a rank pair's sends and receives in
posting order, and a transfer starts when both ends have posted it (a send completes only once its receive is
posted) and takes t. The asynchronous rule (Cleave's simulator without --blocking-p2p): a send leaves when its rank
reaches it and never holds that rank; a receive's data is there t after its send.

This times both on uniform chunk costs F, B and transfer t (milliseconds) and prints the two makespans. It is a
check of the rules, not a price: nothing here feeds the planner. Usage: interleaved_p2p_check.py [p v m F B t]
(default: the four zero-bubble 1F1B-I models at their smallest m, F, B and t from the paper's Table 9);
--smoke (ctest: e2e_planner_interleaved_p2p_check) checks constructed cases: with t = 0 both rules give the published
interleaved makespan (v m + p - 1)(F + B); with t below F and F below B they are equal; with t above F the code's
rule is the slower one.
"""
import collections
import sys


def chunk_of(index, p, v, forward):
    """The model chunk of the index-th forward (or backward) in Megatron's order: groups of p micro-batches."""
    c = (index % (p * v)) // p
    return c if forward else v - 1 - c


def rank_program(r, p, v, m):
    """Rank r's stream: ('F'|'B',) compute, ('post', handle, [(kind, peer)]) and ('wait', handle) events."""
    total = m * v
    warmup = total if m == p else min(2 * (p - r - 1) + (v - 1) * p, total)
    steady = total - warmup
    first, last = r == 0, r == p - 1
    prev, nxt = (r - 1) % p, (r + 1) % p
    events, count = [], [0]

    def post(prefix, ops):
        count[0] += 1
        handle = f"{prefix}{count[0]}"
        events.append(("post", handle, ops))
        return handle

    def forward_ops(send, receive):
        return ([("send", nxt)] if send else []) + ([("recv", prev)] if receive else [])

    def backward_ops(send, receive):
        return ([("send", prev)] if send else []) + ([("recv", nxt)] if receive else [])

    if not first:
        events.append(("wait", post("i", [("recv", prev)])))
    fwd = bwd = None
    for k in range(warmup):
        if fwd:
            events.append(("wait", fwd))
        events.append(("F",))
        send = not (last and chunk_of(k, p, v, True) == v - 1)
        receive = not (first and chunk_of(k + 1, p, v, True) == 0) and k != total - 1
        fwd = post("f", forward_ops(send, receive))
        if k == warmup - 1 and steady > 0:
            bwd = post("b", backward_ops(False, not last))
    for k in range(steady):
        fk = k + warmup
        if fwd:
            events.append(("wait", fwd))
        events.append(("F",))
        send = not (last and chunk_of(fk, p, v, True) == v - 1)
        receive = not (first and chunk_of(fk - (p - 1), p, v, True) == v - 1) and k != steady - 1
        fwd = post("f", forward_ops(send, receive))
        if bwd:
            events.append(("wait", bwd))
        events.append(("B",))
        send = not (first and chunk_of(k, p, v, False) == 0)
        receive = not (last and chunk_of(k - (p - 1), p, v, False) == 0)
        bwd = post("b", backward_ops(send, receive))
    for handle in (bwd, fwd):
        if handle:
            events.append(("wait", handle))
    for k in range(steady, total):
        events.append(("B",))
        send = not (first and chunk_of(k, p, v, False) == 0)
        receive = not (last and chunk_of(k + 1, p, v, False) == v - 1) and k != total - 1
        events.append(("wait", post("c", backward_ops(send, receive))))
    return events


def makespan(p, v, m, F, B, t, rendezvous):
    programs = [rank_program(r, p, v, m) for r in range(p)]
    sends, recvs, ops = collections.defaultdict(list), collections.defaultdict(list), {}
    for r, program in enumerate(programs):
        for event in program:
            if event[0] != "post":
                continue
            ops[(r, event[1])] = event[2]
            for kind, peer in event[2]:
                (sends[(r, peer)] if kind == "send" else recvs[(peer, r)]).append((r, event[1]))
    partner = {}
    for pair in set(sends) | set(recvs):
        assert len(sends[pair]) == len(recvs[pair]), f"unpaired messages between ranks {pair}"
        for s, q in zip(sends[pair], recvs[pair]):
            partner[("send", pair, s)] = q
            partner[("recv", pair, q)] = s
    posted, position, clock = {}, [0] * p, [0.0] * p

    def done(r, handle):  # when every transfer of the post is done; None while a partner has not posted
        end = posted[(r, handle)]
        for kind, peer in ops[(r, handle)]:
            pair = (r, peer) if kind == "send" else (peer, r)
            other = partner[(kind, pair, (r, handle))]
            if other not in posted:
                return None
            if rendezvous:
                end = max(end, max(posted[(r, handle)], posted[other]) + t)
            elif kind == "recv":
                end = max(end, posted[other] + t)
        return end

    moved = True
    while moved:
        moved = False
        for r in range(p):
            while position[r] < len(programs[r]):
                event = programs[r][position[r]]
                if event[0] == "F":
                    clock[r] += F
                elif event[0] == "B":
                    clock[r] += B
                elif event[0] == "post":
                    posted[(r, event[1])] = clock[r]
                else:
                    end = done(r, event[1])
                    if end is None:
                        break
                    clock[r] = max(clock[r], end)
                position[r] += 1
                moved = True
    assert all(position[r] == len(programs[r]) for r in range(p)), "deadlock"
    return max(clock)


def smoke():
    failures = []
    for p, v, m in [(2, 2, 4), (4, 2, 8), (4, 3, 12), (8, 3, 24)]:
        F, B = 1.0, 2.0
        ideal = (v * m + p - 1) * (F + B)
        for rendezvous in (False, True):
            got = makespan(p, v, m, F, B, 0.0, rendezvous)
            if abs(got - ideal) > 1e-9:
                failures.append(f"p {p} v {v} m {m} t 0 rendezvous {rendezvous}: {got}, expected {ideal}")
        a, b = makespan(p, v, m, F, B, 0.25, False), makespan(p, v, m, F, B, 0.25, True)
        if abs(a - b) > 1e-9:
            failures.append(f"p {p} v {v} m {m} t 0.25 < F < B: asynchronous {a}, the code's {b}, expected equal")
    a, b = makespan(4, 2, 8, 1.0, 2.0, 1.5, False), makespan(4, 2, 8, 1.0, 2.0, 1.5, True)
    if not b > a + 1e-9:
        failures.append(f"p 4 v 2 m 8 t 1.5 > F: the code's {b} not above asynchronous {a}")
    for failure in failures:
        print("FAIL", failure)
    print("interleaved_p2p_check smoke:", "FAILED" if failures else "ok")
    return 1 if failures else 0


def main(argv):
    if argv == ["--smoke"]:
        return smoke()
    # The paper's Table 9 (ZB-2p's profiled per-stage TF, TB, TW, Tcomm at the smallest m), per one-layer chunk: a
    # stage holds (layers + 2) / p layer slots, so F = TF / slots and B = (TB + TW) / slots; t = Tcomm.
    table9 = [("1.5B m24", 8, 3, 24, 18.522, 18.086, 9.337, 0.601), ("6.2B m24", 8, 4, 24, 29.718, 29.444, 19.927, 0.527),
              ("14.6B m48", 16, 3, 48, 11.347, 11.248, 8.132, 0.377), ("28.3B m96", 32, 2, 96, 10.419, 10.207, 7.715, 0.408)]
    cases = [(name, p, v, m, tf / v, (tb + tw) / v, tc) for name, p, v, m, tf, tb, tw, tc in table9]
    if len(argv) == 6:
        p, v, m = map(int, argv[:3])
        cases = [("given", p, v, m) + tuple(map(float, argv[3:]))]
    for name, p, v, m, F, B, t in cases:
        a = makespan(p, v, m, F, B, t, rendezvous=False)
        b = makespan(p, v, m, F, B, t, rendezvous=True)
        print(f"{name}: p {p} v {v} m {m} F {F:.2f} B {B:.2f} t {t:.3f}: asynchronous {a:.1f} ms, "
              f"Megatron-Core's posts and waits {b:.1f} ms, ratio {b / a:.4f}")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
