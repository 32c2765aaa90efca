#!/usr/bin/env python3
"""Causal attention forward + backward on the CPU: Cleave's flash kernel against PyTorch's
scaled_dot_product_attention, same machine, same run, interleaved.

Check first (per dtype, on one shape): `attention_shapes_bench ... --dump` writes its inputs and its outputs
(out, dq, dk, dv); this script runs SDPA on the same inputs in float64 (the reference) and in the dtype, and
reports each side's worst error against the reference as max |x - ref| / max |ref| per tensor. Cleave must stay
within TOL[dtype] and within 4x PyTorch's own error plus that tolerance's tenth, or the script stops before timing.

Timing: for every shape, ROUNDS rounds; in each, Cleave (a fresh attention_shapes_bench process, median of REPS
forward + backward calls after one warm-up; with --bench-before, the same for a second build, the code before a
change) then PyTorch (in this process, torch.set_num_threads(THREADS), same
median). Inputs for PyTorch are contiguous [B, H, T, hd] (its preferred layout) with requires_grad; GQA shapes use
enable_gqa=True. The table gives the medians over rounds and Cleave / PyTorch time (below 1: Cleave faster).
With --lock FILE each round holds an exclusive flock on FILE (no build runs beside it).

    eval "$(benchmarks/peers/venv.sh env)"; $VENV/bin/python benchmarks/peers/attention_vs_torch.py \
        --bench build/bin/attention_shapes_bench --lock /work/build.lock

Results: benchmarks/kernels/RESULTS-<date>-attention-vs-torch.md.
"""
import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from peer_util import held  # noqa: E402

TOL = {"f32": 1e-5, "bf16": 2e-2}
DEFAULT_SHAPES = ("1,4,4,512 1,4,4,1024 1,4,4,2048 1,4,4,4096 4,8,8,1024 1,8,2,2048 1,8,2,4096 2,8,2,2048")


def sdpa(q, k, v, gqa):
    return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=gqa)


def read_dump(path, b, hq, hkv, t, hd, dtype):
    """The bench's arrays as float64 torch tensors in [B, H, T, hd] layout (lse [B, H, T])."""
    raw = open(path, "rb").read()
    nq, nk = b * t * hq * hd, b * t * hkv * hd
    sizes = [nq, nk, nk, nq, nq, nq, nk, nk]
    width = 4 if dtype == "f32" else 2
    out, off = [], 0
    for n in sizes:
        if dtype == "f32":
            a = np.frombuffer(raw, np.float32, n, off).astype(np.float64)
        else:
            a = (np.frombuffer(raw, np.uint16, n, off).astype(np.uint32) << 16).view(np.float32).astype(np.float64)
        off += n * width
        heads = hq if n == nq else hkv
        out.append(torch.from_numpy(a.reshape(b, t, heads, hd)).transpose(1, 2).contiguous())
    return out


def torch_grads(q, k, v, dout, dtype, gqa):
    q, k, v = (x.detach().to(dtype).requires_grad_() for x in (q, k, v))
    o = sdpa(q, k, v, gqa)
    o.backward(dout.to(dtype))
    return [x.double() for x in (o.detach(), q.grad, k.grad, v.grad)]


def check(bench, shape, dtype):
    b, hq, hkv, t = shape
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "dump.bin")
        subprocess.run([bench, str(b), str(hq), str(hkv), str(t), "64", dtype, "--dump", path], check=True)
        q, k, v, dout, out, dq, dk, dv = read_dump(path, b, hq, hkv, t, 64, dtype)
    gqa = hq != hkv
    ref = torch_grads(q, k, v, dout, torch.float64, gqa)
    peer = torch_grads(q, k, v, dout, torch.float32 if dtype == "f32" else torch.bfloat16, gqa)
    ok = True
    for name, c, p, r in zip(("out", "dq", "dk", "dv"), (out, dq, dk, dv), peer, ref):
        scale = r.abs().max().item()
        ec, ep = (c - r).abs().max().item() / scale, (p - r).abs().max().item() / scale
        good = ec <= TOL[dtype] and ec <= 4 * ep + TOL[dtype] / 10
        ok &= good
        print(f"check {dtype} {shape} {name}: cleave {ec:.2e} torch {ep:.2e} (max|x-ref|/max|ref|, "
              f"tolerance {TOL[dtype]:.0e}) {'ok' if good else 'FAIL'}")
    return ok


def time_torch(shape, dtype, reps):
    b, hq, hkv, t = shape
    dt = torch.float32 if dtype == "f32" else torch.bfloat16
    g = torch.Generator().manual_seed(0)
    q = (torch.rand(b, hq, t, 64, generator=g) * 2 - 1).to(dt).requires_grad_()
    k, v = ((torch.rand(b, hkv, t, 64, generator=g) * 2 - 1).to(dt).requires_grad_() for _ in range(2))
    dout = (torch.rand(b, hq, t, 64, generator=g) * 2 - 1).to(dt)
    times = []
    for r in range(reps + 1):
        q.grad = k.grad = v.grad = None
        t0 = time.perf_counter()
        o = sdpa(q, k, v, hq != hkv)
        o.backward(dout)
        if r > 0:
            times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e3


def time_cleave(bench, shape, dtype, reps, threads):
    b, hq, hkv, t = shape
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), OPENBLAS_NUM_THREADS="1")
    r = subprocess.run([bench, str(b), str(hq), str(hkv), str(t), "64", dtype, str(reps)], env=env, check=True,
                       capture_output=True, text=True)
    words = r.stdout.split()
    return float(words[words.index("ms") + 1])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bench", required=True, help="build/bin/attention_shapes_bench")
    ap.add_argument("--bench-before", default="", help="a second attention_shapes_bench (the code before a change)")
    ap.add_argument("--shapes", default=DEFAULT_SHAPES, help="space-separated B,Hq,Hkv,T (head dim 64)")
    ap.add_argument("--dtypes", default="f32,bf16")
    ap.add_argument("--check-shape", default="2,8,2,1000")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--lock", default="")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    print(f"# {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} | torch {torch.__version__} "
          f"({torch.backends.cpu.get_cpu_capability()}) | threads {a.threads} | command: {' '.join(sys.argv)}")
    dtypes = a.dtypes.split(",")
    check_shape = tuple(int(x) for x in a.check_shape.split(","))
    if not all([check(a.bench, check_shape, d) for d in dtypes]):
        sys.exit("attention_vs_torch: Cleave's outputs are off the reference; not timing")
    shapes = [tuple(int(x) for x in s.split(",")) for s in a.shapes.split()]
    results = {}
    for rnd in range(a.rounds):
        with held(a.lock):
            for shape in shapes:
                for d in dtypes:
                    c = time_cleave(a.bench, shape, d, a.reps, a.threads)
                    c0 = time_cleave(a.bench_before, shape, d, a.reps, a.threads) if a.bench_before else float("nan")
                    p = time_torch(shape, d, a.reps)
                    results.setdefault((shape, d), []).append((c, p, c0))
                    print(f"round {rnd + 1} {d} {shape}: cleave {c:.1f} ms before {c0:.1f} ms torch {p:.1f} ms",
                          flush=True)
    print("\n| B, Hq/Hkv, T | dtype | Cleave ms | Cleave before ms | PyTorch ms | Cleave / PyTorch | before / PyTorch |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: |")
    for (shape, d), runs in results.items():
        c, p, c0 = (statistics.median(r[i] for r in runs) for i in range(3))
        print(f"| {shape[0]}, {shape[1]}/{shape[2]}, {shape[3]} | {d} | {c:.1f} | {c0:.1f} | {p:.1f} | {c / p:.2f} | "
              f"{c0 / p:.2f} |")


if __name__ == "__main__":
    main()
