#!/usr/bin/env python3
"""torch.mm GFLOP/s on the training shapes of benchmarks/kernels/gemm_backends_bench.cpp (issue 39 part 5).

The same Linear shapes, passes and dtypes as Cleave's bench, so its rows compare line for line:
  forward      y = x W^T + b        F.linear (addmm with the bias)
  input_grad   dx = dy W            torch.mm
  weight_grad  dW += dy^T x         torch.addmm into an f32 W gradient (bf16: the product in bf16 operands,
                                     accumulated into the f32 gradient, as Cleave's bf16 step does)
GFLOP/s = 2*m*n*k / time, the median of 7 samples, each repeating the GEMM until it lasts 20 ms, after a
warm-up; torch.set_num_threads(THREADS). Markdown rows on stdout.

    /work/venv-peers/bin/python benchmarks/peers/torch_gemm_bench.py [--threads 1,2] [--filter MODEL[,MODEL...]]

Side by side with Cleave (--cleave-bench build/bin/gemm_backends_bench): ROUNDS rounds, each running Cleave's
bench (its own double-reference check first, then its three libraries through ops::gemm) and this script's
torch rows, in alternating order (Cleave first in odd rounds), each round holding --lock FILE if given; after
every round, one merged table: every library's and torch's median GFLOP/s over the rounds so far and Cleave's
default library (--default, the one `cleave version` names for this CPU) over torch.mm, and a summary per model,
dtype and thread count (the median and range of that ratio over the model's GEMMs, and the summed GEMM time of one
block's Linears on each side). Its --filter names models, comma-separated (e.g. "peer small,peer large d512
T128 b16"): each is passed to Cleave's bench in turn (it matches "MODEL LAYER"), and torch takes the same rows.

    /work/venv-peers/bin/python benchmarks/peers/torch_gemm_bench.py --filter "peer small,peer large d512 T128 b16" \
        --cleave-bench build/bin/gemm_backends_bench --rounds 2 --lock /work/build.lock
"""
import argparse
import os
import statistics
import subprocess
import sys
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
    block("peer large d512 T128 b16", 2048, 512, 2048)  # cpu_train_bench.py's "large" micro-batch
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


PASS = {"forward": "fwd", "input_grad": "dgrad", "weight_grad": "wgrad"}  # Cleave's bench names the passes so


def torch_rows(threads_list, filt):
    """{(model, layer, pass, dtype, threads): (m x n x k, GFLOP/s)} for torch, in Cleave's bench's names."""
    rows = {}
    g = torch.Generator().manual_seed(0)
    for threads in threads_list:
        torch.set_num_threads(threads)
        for model, layer, rows_, fin, fout in linears():
            if filt and not any(f in model + " " + layer for f in filt.split(",")):
                continue
            for dtype in (torch.float32, torch.bfloat16):
                x = torch.randn(rows_, fin, generator=g).to(dtype)
                w = torch.randn(fout, fin, generator=g).to(dtype)
                b = torch.randn(fout, generator=g).to(dtype)
                dy = torch.randn(rows_, fout, generator=g).to(dtype)
                dw = torch.zeros(fout, fin)
                passes = {
                    "forward": (lambda: F.linear(x, w, b), (rows_, fout, fin)),
                    "input_grad": (lambda: torch.mm(dy, w), (rows_, fin, fout)),
                    "weight_grad": ((lambda: dw.addmm_(dy.t(), x)) if dtype == torch.float32 else
                                    (lambda: dw.add_(torch.mm(dy.t(), x))), (fout, fin, rows_)),
                }
                for name, (fn, (m, n, k)) in passes.items():
                    flops = 2.0 * m * n * k
                    for _ in range(3):
                        fn()
                    med = statistics.median(sample(fn, flops) for _ in range(7))
                    dt = "f32" if dtype == torch.float32 else "bf16"
                    rows[(model, layer, PASS[name], dt, threads)] = (f"{m}x{n}x{k}", med)
    return rows


def cleave_rows(binary, filt, threads_list):
    """Cleave's gemm_backends_bench rows: ({key: {library: GFLOP/s}}, [library names], its header lines)."""
    out = ""
    for f in filt.split(","):  # one run per model named
        r = subprocess.run([binary, "--filter", f], capture_output=True, text=True)
        if r.returncode != 0:
            sys.exit(f"{binary} failed ({r.returncode}; its check against the double reference?):\n{r.stderr[-2000:]}")
        out += r.stdout
    libs, rows, header = [], {}, []
    for line in out.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("| model |"):
            libs = cells[6:-1]
        elif line.startswith("| ") and libs and len(cells) == 7 + len(libs):
            model, layer, pas, _mnk, dt, threads = cells[:6]
            if int(threads) in threads_list:
                rows[(model, layer, pas, dt, int(threads))] = dict(zip(libs, (float(c) for c in cells[6:-1])))
        elif line and not line.startswith("|") and line not in header:
            header.append(line)
    return rows, libs, header


def side_by_side(a):
    """The merged rounds (module header)."""
    from peer_util import held
    threads_list = [int(t) for t in a.threads.split(",")]
    cl, th, libs, header = [], [], [], []
    for rnd in range(a.rounds):
        with held(a.lock):
            t0 = time.time()
            for side in (("cleave", "torch") if rnd % 2 == 0 else ("torch", "cleave")):
                if side == "cleave":
                    rows, libs, header = cleave_rows(a.cleave_bench, a.filter, threads_list)
                    cl.append(rows)
                else:
                    th.append(torch_rows(threads_list, a.filter))
            print(f"round {rnd + 1}: {len(cl[-1])} Cleave rows, {len(th[-1])} torch rows, held the lock "
                  f"{time.time() - t0:.0f} s", flush=True)
        tables(a, header, libs, cl, th)  # after every round: a run stopped early keeps what it measured


def tables(a, header, libs, cl, th):
    """The merged table and the per-model summary of the rounds so far (medians)."""
    print("\n".join(header))
    print(f"Medians over {len(th)} rounds of GFLOP/s; Cleave's default here: {a.default}.\n")
    print("| model | layer | pass | m x n x k | dtype | threads | " + " | ".join(f"Cleave {x}" for x in libs) +
          " | torch | Cleave default / torch |")
    print("| --- | --- | --- | --- | --- | ---: | " + " | ".join("---:" for _ in libs) + " | ---: | ---: |")
    summary = {}
    for key, (mnk, _) in th[0].items():
        if key not in cl[0]:
            continue
        lib_med = {x: statistics.median(r[key][x] for r in cl) for x in libs}
        t_med = statistics.median(r[key][1] for r in th)
        ratio = lib_med[a.default] / t_med
        m, n, k = (int(v) for v in mnk.split("x"))
        s = summary.setdefault((key[0], key[3], key[4]), ([], [0.0], [0.0]))
        s[0].append(ratio)
        s[1][0] += 2.0 * m * n * k / lib_med[a.default] * 1e-6  # ms
        s[2][0] += 2.0 * m * n * k / t_med * 1e-6
        print(f"| {key[0]} | {key[1]} | {key[2]} | {mnk} | {key[3]} | {key[4]} | " +
              " | ".join(f"{lib_med[x]:.1f}" for x in libs) + f" | {t_med:.1f} | {ratio:.2f} |")
    print(f"\n| model | dtype | threads | Cleave {a.default} / torch, median of the GEMMs (min-max) | "
          f"one block's Linear GEMMs: Cleave ms | torch ms | torch time / Cleave time |")
    print("| --- | --- | ---: | --- | ---: | ---: | ---: |")
    for (model, dt, threads), (ratios, c_ms, t_ms) in sorted(summary.items()):
        print(f"| {model} | {dt} | {threads} | {statistics.median(ratios):.2f} ({min(ratios):.2f}-{max(ratios):.2f}) | "
              f"{c_ms[0]:.2f} | {t_ms[0]:.2f} | {t_ms[0] / c_ms[0]:.2f} |", flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--filter", default="", help="models, comma-separated substrings")
    ap.add_argument("--cleave-bench", default="", help="Cleave's gemm_backends_bench: run side by side (header)")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--default", default="onednn", help="Cleave's default library on this CPU (cleave version)")
    ap.add_argument("--lock", default="", help="flock this file during each round (e.g. /work/build.lock)")
    a = ap.parse_args()
    print(f"torch {torch.__version__}, {torch.backends.cpu.get_cpu_capability()}, BLAS: "
          f"{'MKL' if torch.backends.mkl.is_available() else 'other'}, mkldnn {torch.backends.mkldnn.is_available()}")
    if a.cleave_bench:
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        side_by_side(a)
        return
    print("| model | layer | pass | dtype | threads | m x n x k | torch GFLOP/s |")
    print("| --- | --- | --- | --- | ---: | --- | ---: |")
    for (model, layer, pas, dt, threads), (mnk, med) in torch_rows([int(t) for t in a.threads.split(",")],
                                                                     a.filter).items():
        print(f"| {model} | {layer} | {pas} | {dt} | {threads} | {mnk} | {med:.1f} |")


if __name__ == "__main__":
    main()
