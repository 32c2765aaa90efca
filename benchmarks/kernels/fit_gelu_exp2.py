#!/usr/bin/env python3
"""Fits the polynomial behind kernels/cpu/gelu.cpp's 2^f, rounds it to float, and measures it and GELU.

GELU's tanh form is computed as a logistic: 0.5 x (1 + tanh(u)) = x / (1 + e^(-2u)), and e^(-2u) = 2^w with
w = -2 log2(e) u, so one power of two does it: w = n + f with n = round(w) and f in [-1/2, 1/2] exact, 2^n built in
the exponent bits and 2^f = 1 + f q(f), q of degree 4. This script (numpy only; run it with any Python that has
numpy, e.g. /work/venv-peers/bin/python benchmarks/kernels/fit_gelu_exp2.py):
  1. fits q for the least maximum relative error of 2^f on [-1/2, 1/2] (Lawson's iteratively reweighted least
     squares on a dense grid, in double),
  2. rounds the coefficients to float one at a time, refitting the ones not yet rounded after each,
  3. measures 2^f evaluated in float (Horner, no FMA, as the kernel) against double 2^f over every float in
     [-1/2, 1/2] (in ulps of the float result),
  4. emulates the kernel's GELU forward and backward in float32 (numpy's float32 operations round each result
     as IEEE does; the kernel is built without FMA contraction) and measures both against the double formula over
     every float with 1e-3 <= |x| <= 10 (stride 1 in the bit pattern with --full, else every 16th), next to the
     exp form the kernel used before (also emulated), per interval of x: the largest absolute error and the largest
     error in units of the kernel tests' tolerance (1e-6 + 1e-5 |want|).
It prints the coefficients as C++ float literals (round-trip exact) and the errors.
"""
import sys

import numpy as np

f32 = np.float32
DEGREE = 4  # of q: 2^f = 1 + f q(f)


def fit_q(degree, fixed=()):
    """Relative minimax q with q's first len(fixed) coefficients fixed; returns double coefficients."""
    f = np.linspace(-0.5, 0.5, 20001)
    f = f[f != 0.0]
    want = np.exp2(f)
    # 1 + f sum_j c_j f^j = 2^f  ->  sum_j c_j f^(j+1) = 2^f - 1, the error relative to 2^f.
    basis = np.stack([f ** (j + 1) for j in range(degree + 1)], 1)
    rhs = want - 1.0 - basis[:, : len(fixed)] @ np.array(fixed, dtype=float) if fixed else want - 1.0
    free = basis[:, len(fixed):] / want[:, None]
    rhs = rhs / want
    weights = np.ones_like(f) / len(f)
    best = None
    for _ in range(400):
        sw = np.sqrt(weights)
        c, *_ = np.linalg.lstsq(free * sw[:, None], rhs * sw, rcond=None)
        err = np.abs(free @ c - rhs)
        if best is None or err.max() < best[0]:
            best = (err.max(), c)
        weights = weights * err / err.max() + 1e-300
        weights /= weights.sum()
    return list(fixed) + list(best[1])


def fit_float_coefficients():
    coeffs = fit_q(DEGREE)
    rounded = []
    for j in range(DEGREE + 1):
        rounded.append(float(f32(coeffs[j])))
        if j < DEGREE:
            coeffs = fit_q(DEGREE, rounded)
    return [f32(c) for c in rounded]


def exp2_frac(f, q):
    """1 + f q(f) in float, Horner, as the kernel."""
    acc = np.full_like(f, q[-1])
    for c in q[-2::-1]:
        acc = acc * f + c
    return acc * f + f32(1.0)


def ulps(got, want):
    ulp = np.spacing(np.abs(want).astype(np.float32)).astype(np.float64)
    return np.abs(got.astype(np.float64) - want) / ulp


def floats_between(lo, hi, stride):
    """Every stride-th float in [lo, hi] by bit pattern, 0 < lo < hi, and their negatives."""
    bits = np.arange(f32(lo).view(np.uint32), f32(hi).view(np.uint32) + 1, stride, dtype=np.uint32)
    pos = bits.view(np.float32)
    return np.concatenate([-pos[::-1], pos])


# GELU constants: u = k (x + c x^3); w = -2 log2(e) u = x (a1 + a3 x^2); 2 du/dx = d0 + d2 x^2.
K = np.sqrt(2.0 / np.pi)
C = 0.044715
LOG2E = 1.0 / np.log(2.0)
A1, A3 = f32(-2.0 * LOG2E * K), f32(-2.0 * LOG2E * K * C)
D0, D2 = f32(2.0 * K), f32(6.0 * K * C)
MAGIC = f32(12582912.0)  # 1.5 * 2^23: adding it rounds to an integer held in the low mantissa bits
F32_MAX = f32(np.finfo(np.float32).max)


def pow2(w, q, w_max):
    """2^w for float w, w clamped to [-127, w_max <= 128] (NaN passes); 2^n built in the exponent bits."""
    w = np.where(w > w_max, w_max, w)
    w = np.where(w < f32(-127.0), f32(-127.0), w)
    biased = w + MAGIC
    n = biased - MAGIC
    p = exp2_frac(w - n, q)
    # biased's bits are 0x4B400000 + n; shifting n + 127 into the exponent field drops the 0x4B4 above it.
    scale = ((biased.view(np.uint32) + np.uint32(127)) << np.uint32(23)).view(np.float32)
    return p * scale


def gelu_new(x, q):
    e = pow2(x * (A1 + A3 * (x * x)), q, f32(128.0))  # e^(-2u); +inf for very negative x
    s = f32(1.0) / (f32(1.0) + e)
    x_finite = np.where(x > F32_MAX, F32_MAX, x)  # +inf - inf * 0 would be NaN; the kernel's +inf stays +inf
    return np.where(x > 0, x - x_finite * (e * s), x * s)


X_CLAMP = f32(10.0)


def gelu_grad_new(x, q):
    xc = np.where(x > X_CLAMP, X_CLAMP, x)
    xc = np.where(xc < -X_CLAMP, -X_CLAMP, xc)
    x2 = xc * xc
    e = pow2(xc * (A1 + A3 * x2), q, f32(128.0))
    s = f32(1.0) / (f32(1.0) + e)
    return (s + (xc * s) * ((e * s) * (D0 + D2 * x2))) + x * f32(0.0)


def exp_old(x):
    """vec_math.hpp's exp_vec before this change (Cephes' expf polynomial), to emulate the old kernel."""
    x = np.where(x > f32(88), f32(88), x)
    x = np.where(x < f32(-87), f32(-87), x)
    biased = x * f32(1.44269504088896341) + MAGIC
    n = biased - MAGIC
    r = x - n * f32(0.693359375)
    r = r - n * f32(-2.12194440e-4)
    p = np.full_like(r, f32(1.9875691500e-4))
    for c in (1.3981999507e-3, 8.3334519073e-3, 4.1665795894e-2, 1.6666665459e-1, 5.0000001201e-1):
        p = p * r + f32(c)
    p = p * r * r + r + f32(1)
    bits = ((biased.view(np.uint32) - np.uint32(0x4B400000)) + np.uint32(127)) << np.uint32(23)
    return p * bits.view(np.float32)


def gelu_old(x):
    k, c = f32(K), f32(C)
    u = k * (x + c * x * x * x)
    t = f32(1) - f32(2) / (exp_old(f32(2) * u) + f32(1))
    return f32(0.5) * x * (f32(1) + t)


def gelu_grad_old(x):
    k, c = f32(K), f32(C)
    u = k * (x + c * x * x * x)
    t = f32(1) - f32(2) / (exp_old(f32(2) * u) + f32(1))
    return f32(0.5) * (f32(1) + t) + f32(0.5) * x * (f32(1) - t * t) * (k * (f32(1) + f32(3) * c * x * x))


def reference(x):
    x = x.astype(np.float64)
    u = K * (x + C * x ** 3)
    t = np.tanh(u)
    return 0.5 * x * (1 + t), 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * K * (1 + 3 * C * x * x)


EDGES = [-10, -6, -5, -4, -3, -2, -1, 1, 2, 3, 4, 5, 6, 10]


def error_rows(x, got, want):
    err = np.abs(got.astype(np.float64) - want)
    in_tol = err / (1e-6 + 1e-5 * np.abs(want))
    rows = []
    for lo, hi in zip(EDGES, EDGES[1:]):
        m = (x >= lo) & (x < hi)
        rows.append((err[m].max(), in_tol[m].max()) if m.any() else (0.0, 0.0))
    return rows


def main():
    stride = 1 if "--full" in sys.argv else 16
    q = fit_float_coefficients()
    print("q (2^f = 1 + f q(f), f in [-1/2, 1/2]), highest degree last:")
    for j, c in enumerate(q):
        print(f"  c{j + 1} = {np.format_float_positional(c, unique=True)}f  ({float(c):.17g})")
    worst, at, count = 0.0, 0.0, 0
    for e in ([] if "--skip-2f" in sys.argv else range(-26, -1)):  # one binade [2^e, 2^(e+1)) of f at a time, both signs; below 2^-26 1 + f q(f) is 1
        f = floats_between(2.0 ** e, np.nextafter(f32(2.0 ** (e + 1)), f32(0)), 1)
        err = ulps(exp2_frac(f, q), np.exp2(f.astype(np.float64)))
        count += len(f)
        if err.max() > worst:
            worst, at = err.max(), f[err.argmax()]
    f = np.array([-0.5, 0.5, 0.0], dtype=np.float32)
    worst = max(worst, ulps(exp2_frac(f, q), np.exp2(f.astype(np.float64))).max())
    print(f"2^f over all {count + 3:,} floats with 2^-26 <= |f| <= 1/2 and 0: max error {worst:.3f} ulp (at f = {at:.9g})")
    w = floats_between(1e-45, 126.0, 64)
    with np.errstate(over="ignore"):
        err = ulps(pow2(w, q, f32(128.0)), np.exp2(w.astype(np.float64)))
    print(f"2^w over every 64th float with |w| <= 126 (normal results): max error {err.max():.3f} ulp")

    kernels = {
        "y before": (gelu_old, 0),
        "y after": (lambda v: gelu_new(v, q), 0),
        "g' before": (gelu_grad_old, 1),
        "g' after": (lambda v: gelu_grad_new(v, q), 1),
    }
    rows = {name: [(0.0, 0.0)] * (len(EDGES) - 1) for name in kernels}
    lo_bits, hi_bits = int(f32(1e-3).view(np.uint32)), int(f32(10.0).view(np.uint32))
    chunk = 1 << 22
    count = 0
    for start in range(lo_bits, hi_bits + 1, chunk):  # a slice of the bit patterns at a time, both signs
        pos = np.arange(start, min(start + chunk, hi_bits + 1), stride, dtype=np.uint32).view(np.float32)
        x = np.concatenate([-pos, pos])
        count += len(x)
        want = reference(x)
        with np.errstate(all="ignore"):
            for name, (kernel, which) in kernels.items():
                got = error_rows(x, kernel(x), want[which])
                rows[name] = [(max(a[0], b[0]), max(a[1], b[1])) for a, b in zip(rows[name], got)]
    every = "every" if stride == 1 else f"every {stride}th"
    print(f"\nGELU against the double formula, {every} float with 1e-3 <= |x| <= 10 ({count:,} values):")
    print("largest absolute error per interval of x (in units of the tests' tolerance 1e-6 + 1e-5 |want|)")
    print("| x | " + " | ".join(rows) + " |")
    print("| --- |" + " ---: |" * len(rows))
    for i, (lo, hi) in enumerate(zip(EDGES, EDGES[1:])):
        cells = [f"{r[i][0]:.2g} ({r[i][1]:.3f})" for r in rows.values()]
        print(f"| [{lo}, {hi}) | " + " | ".join(cells) + " |")
    print("| all | " + " | ".join(f"{max(e for e, _ in r):.2g} ({max(t for _, t in r):.3f})" for r in rows.values()) + " |")


if __name__ == "__main__":
    main()
