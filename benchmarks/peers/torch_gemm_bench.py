#!/usr/bin/env python3
"""torch.mm GFLOP/s on the training shapes of benchmarks/kernels/gemm_backends_bench.cpp (issue 39 part 5).

The same Linear shapes, passes and dtypes as Cleave's bench, so its rows compare line for line:
  forward      y = x W^T + b        F.linear (addmm with the bias)
  input_grad   dx = dy W            torch.mm
  weight_grad  dW += dy^T x         torch.addmm into an f32 W gradient (bf16: the product in bf16 operands,
                                     accumulated into the f32 gradient, as Cleave's bf16 step does)
GFLOP/s = 2*m*n*k / time, the median of 7 samples, each repeating the GEMM until it lasts 20 ms, after a
warm-up; torch.set_num_threads(THREADS). Markdown rows on stdout.

    /work/venv-peers/bin/python benchmarks/peers/torch_gemm_bench.py [--threads 1,2] [--filter SUBSTRING]
"""
import argparse
import statistics
import time

import torch
import torch.nn.functional as F


def linears():
    out = []

    def block(model, rows, d, ff):
        out.extend([(model, "qkv", rows, d, 3 * d), (model, "attn_proj", rows, d, d),
                    (model, "mlp_fc", rows, d, ff), (model, "mlp_proj", rows, ff, d)])
    block("gpt_fortunes d128 T64 mb8", 512, 128, 512)
    out.append(("gpt_fortunes d128 T64 mb8", "lm_head", 512, 128, 256))
    block("peer small d256 T64 b16", 1024, 256, 1024)
    block("peer large d512 T128 b8", 1024, 512, 2048)
    block("gpt2-124M T1024 b1", 1024, 768, 3072)
    return out


def sample(fn, flops):
    reps, t = 1, 0.0
    while True:
        t0 = time.perf_counter()
        for _ in range(reps):
            fn()
        t = time.perf_counter() - t0
        if t >= 0.02:
            return flops * reps / t / 1e9
        reps *= 2


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--filter", default="")
    a = ap.parse_args()
    print(f"torch {torch.__version__}, {torch.backends.cpu.get_cpu_capability()}, BLAS: "
          f"{'MKL' if torch.backends.mkl.is_available() else 'other'}, mkldnn {torch.backends.mkldnn.is_available()}")
    print("| model | layer | pass | dtype | threads | m x n x k | torch GFLOP/s |")
    print("| --- | --- | --- | --- | ---: | --- | ---: |")
    g = torch.Generator().manual_seed(0)
    for threads in (int(t) for t in a.threads.split(",")):
        torch.set_num_threads(threads)
        for model, layer, rows, fin, fout in linears():
            if a.filter and a.filter not in model:
                continue
            for dtype in (torch.float32, torch.bfloat16):
                x = torch.randn(rows, fin, generator=g).to(dtype)
                w = torch.randn(fout, fin, generator=g).to(dtype)
                b = torch.randn(fout, generator=g).to(dtype)
                dy = torch.randn(rows, fout, generator=g).to(dtype)
                dw = torch.zeros(fout, fin)
                passes = {
                    "forward": (lambda: F.linear(x, w, b), (rows, fout, fin)),
                    "input_grad": (lambda: torch.mm(dy, w), (rows, fin, fout)),
                    "weight_grad": ((lambda: dw.addmm_(dy.t(), x)) if dtype == torch.float32 else
                                    (lambda: dw.add_(torch.mm(dy.t(), x))), (fout, fin, rows)),
                }
                for name, (fn, (m, n, k)) in passes.items():
                    flops = 2.0 * m * n * k
                    for _ in range(3):
                        fn()
                    med = statistics.median(sample(fn, flops) for _ in range(7))
                    dt = "f32" if dtype == torch.float32 else "bf16"
                    print(f"| {model} | {layer} | {name} | {dt} | {threads} | {m} x {n} x {k} | {med:.1f} |",
                          flush=True)


if __name__ == "__main__":
    main()
