#!/usr/bin/env python3
"""The roofline's price of unfused (standard) attention against its published speed (issue 38; docs/planner.md,
"Attention kernels by pass").

Evaluates, at the FlashAttention-2 paper's A100 benchmark shapes (batch x T = 16k tokens, hidden 2048, head dim 64
and 128, no mask, 16-bit), what `cleave simulate --attention probabilities` would charge for the scores, softmax and
products of one attention layer WITHOUT a named kernel: each product max(FLOPs / (peak x curve(FLOPs)), its
wave-quantized time, its three matrices' bytes / memory bandwidth) as HardwareProfile::gemm_seconds does, the
softmax's bytes (forward 2n, backward 3n of 2-byte elements) over the bandwidth and 3 / 5 kernel launches
(partition::attention_probabilities_work). Prints that as TFLOP/s, counted as the benchmark counts them (forward
4 T^2 d per head, backward 2.5x), next to the published `pytorch` rates in the profile's attention_rates.
Usage: benchmarks/planner/standard_attention_check.py [PROFILE] (default profiles/a100_80gb_sxm.json).
"""
import json
import math
import os
import sys

root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
p = json.load(open(sys.argv[1] if len(sys.argv) > 1 else os.path.join(root, "profiles/a100_80gb_sxm.json")))
curve = p["gemm_efficiency"]
peak, bandwidth = p["peak_tflops"]["bf16"] * 1e12, p["memory_bandwidth_GBps"] * 1e9
top, sms, tiles, launch = max(e for _, e in curve), p["sm_count"], p["gemm_tiles"], p["kernel_launch_us"] * 1e-6


def efficiency(flops):  # HardwareProfile::gemm_efficiency_at: piecewise linear in log FLOPs, flat past the ends
    if flops <= curve[0][0]:
        return curve[0][1]
    for (a, ea), (b, eb) in zip(curve, curve[1:]):
        if flops <= b:
            return ea + (math.log(flops) - math.log(a)) / (math.log(b) - math.log(a)) * (eb - ea)
    return curve[-1][1]


def gemm_s(m, n, k, batch):  # HardwareProfile::gemm_seconds for a 16-bit library GEMM
    flops = 2 * m * n * k * batch
    waves = min(math.ceil(batch * math.ceil(m / tm) * math.ceil(n / tn) / sms) * 2 * tm * tn * k * sms / (peak * top)
                for tm, tn in tiles)
    return max(flops / (peak * efficiency(flops)), waves, (m * k + k * n + m * n) * batch * 2 / bandwidth)


def published(kernel, pass_, d, t):
    for c in p.get("attention_rates", []):
        if (c["kernel"], c["pass"], c["mask"], c["head_dim"]) == (kernel, pass_, "none", d):
            return dict(c["tflops_by_seq"]).get(t)
    return None


print("head dim  T      roofline F / published   ratio   roofline I / published   ratio")
for d in (64, 128):
    for t in (512, 1024, 2048, 4096, 8192):
        heads = (16384 // t) * (2048 // d)  # batch x heads of the benchmark
        n = heads * t * t
        forward = gemm_s(t, t, d, heads) + gemm_s(t, d, t, heads) + 2 * n * 2 / bandwidth + 3 * launch
        backward = gemm_s(t, t, d, heads) + 3 * gemm_s(t, d, t, heads) + 3 * n * 2 / bandwidth + 5 * launch
        flops = 4 * t * t * d * heads
        rf, rb = flops / forward / 1e12, 2.5 * flops / backward / 1e12
        pf, pb = published("pytorch", "forward", d, t), published("pytorch", "backward", d, t)
        print(f"{d:8d}  {t:5d}  {rf:6.0f} / {pf or float('nan'):4.0f}            {rf / pf if pf else float('nan'):5.2f}"
              f"   {rb:6.0f} / {pb or float('nan'):4.0f}            {rb / pb if pb else float('nan'):5.2f}")
