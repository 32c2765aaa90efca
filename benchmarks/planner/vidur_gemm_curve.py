#!/usr/bin/env python3
"""The A100 and H100 profiles' GEMM size curves from Vidur's published operator profiles, one rule for both
(docs/planner.md, "GEMM tile and wave quantization"; profiles/a100_80gb_sxm.json and profiles/h100_sxm.json
sources.gemm_efficiency; the H100's: --gpu h100 --peak-tflops 989 --bandwidth-GBps 2970).

Vidur (microsoft/vidur, MLSys 2024) publishes the kernel time of every linear layer of a transformer block's forward,
timed in isolation from communication on one GPU: data/profiling/compute/<gpu>/<model>/mlp.csv, columns
time_stats.<op>.median (ms, the median over the profiled layers), one row per token count and tensor-parallel degree.
This script turns each row's four GEMMs (attn_pre_proj: m x (heads + 2 kv heads)·d/tp x E; attn_post_proj:
m x E x heads·d/tp; mlp_up_proj: m x (2 if gated)·F/tp x E; mlp_down_proj: m x E x F/tp) into a fraction of the
peak, keeps the compute-bound ones (arithmetic intensity 2mnk / (2(mk + kn + mn)) at least peak / bandwidth, the
profile's own ridge point: the roofline's memory term prices the others) and prints the median fraction in bins a
factor 8 wide centred on 2^30, 2^33, ... FLOPs, the curve's points. Nothing here reads a training run.
Usage: vidur_gemm_curve.py VIDUR_CHECKOUT [--gpu a100] [--peak-tflops 312] [--bandwidth-GBps 1700]
"""
import argparse
import csv
import glob
import os
import statistics

OPS = ("attn_pre_proj", "attn_post_proj", "mlp_up_proj", "mlp_down_proj")


def gemms(row):
    """The (m, n, k) of the row's four linear layers, by op name."""
    e, f = int(row["n_embd"]), int(row["n_expanded_embd"])
    heads, kv, tp = int(row["n_head"]), int(row["n_kv_head"]), int(row["num_tensor_parallel_workers"])
    d, m = e // heads, int(row["num_tokens"])
    gate = 2 if row["use_gated_mlp"] == "True" else 1
    return {"attn_pre_proj": (m, (heads + 2 * kv) * d // tp, e), "attn_post_proj": (m, e, heads * d // tp),
            "mlp_up_proj": (m, gate * f // tp, e), "mlp_down_proj": (m, e, f // tp)}


def fractions(root, gpu, peak, bandwidth):
    """(FLOPs, fraction of peak) of every compute-bound GEMM in the GPU's profiles."""
    ridge = peak / bandwidth
    out = []
    for path in sorted(glob.glob(os.path.join(root, "data/profiling/compute", gpu, "*", "*", "mlp.csv"))):
        with open(path) as f:
            for row in csv.DictReader(f):
                for op, (m, n, k) in gemms(row).items():
                    flops = 2.0 * m * n * k
                    if flops / (2.0 * (m * k + k * n + m * n)) < ridge:
                        continue
                    seconds = float(row[f"time_stats.{op}.median"]) * 1e-3
                    out.append((flops, flops / seconds / peak))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("root", help="a checkout of microsoft/vidur")
    ap.add_argument("--gpu", default="a100")
    ap.add_argument("--peak-tflops", type=float, default=312.0)
    ap.add_argument("--bandwidth-GBps", type=float, default=1700.0)
    args = ap.parse_args()
    points = fractions(args.root, args.gpu, args.peak_tflops * 1e12, args.bandwidth_GBps * 1e9)
    if not points:
        raise SystemExit(f"no mlp.csv under {args.root}/data/profiling/compute/{args.gpu}: is it a Vidur checkout?")
    print("FLOPs (bin centre)  GEMMs  median fraction of peak")
    for e in range(24, 60, 3):
        bin_ = [x for flops, x in points if 2 ** (e - 1.5) <= flops < 2 ** (e + 1.5)]
        if bin_:
            print(f"{2.0 ** e:18.1f}  {len(bin_):5d}  {statistics.median(bin_):.3f}")


if __name__ == "__main__":
    main()
