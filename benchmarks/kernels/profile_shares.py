# Shares of a `perf record -g` profile of a training step (benchmarks/kernels/RESULTS-2026-12-01-e-elementwise.md):
# the GEMM libraries (oneDNN JIT code, libdnnl, OpenBLAS), what is outside them (Cleave, the kernel, libc) and the
# named row and element-wise kernels, told apart by their signatures (every ISA path of a kernel file shares the
# names forward_avx512 etc.). usage: python3 benchmarks/kernels/profile_shares.py PERF_DATA...
import subprocess, sys, re, collections
LABELS = [
  ("layernorm forward", r"::(forward_row|forward_(baseline|avx2|avx512))\(float const\*, float const\*, float const\*, float\*, float\*, float\*, long, long, float\)|forward_row\(float const\*, float const\*, float const\*, float\*, float\*, float\*"),
  ("layernorm backward input", r"::(backward_input_row|backward_input_(baseline|avx2|avx512))\(float const\*, float const\*, float const\*, float const\*, float const\*, float\*, long, long\)|backward_input_row\(float const\*, float const\*, float const\*, float, float"),
  ("layernorm weight grad", r"backward_weight_\w+<[^>]*>\((float|unsigned short) const\*, (float|unsigned short) const\*, float const\*, float const\*, float\*, float\*"),
  ("rmsnorm forward", r"::forward_(baseline|avx2|avx512)\(float const\*, float const\*, float\*, float\*, long, long, float\)|add_forward_"),
  ("rmsnorm backward input", r"::(add_)?backward_input_(baseline|avx2|avx512)\(float const\*, float const\*, float const\*, float const\*, float\*, long, long\)|add_backward_input_"),
  ("rmsnorm weight grad", r"backward_weight_\w+<[^>]*>\((float|unsigned short) const\*, (float|unsigned short) const\*, float const\*, float\*, long, long\)"),
  ("gelu forward", r"::forward_(baseline|avx2|avx512)\(float const\*, float\*, long\)"),
  ("gelu backward", r"::backward_(baseline|avx2|avx512)\(float const\*, float const\*, float\*, long\)"),
  ("adamw", r"adamw"),
  ("memset", r"memset"),
  ("memmove", r"memmove|memcpy"),
]
for f in sys.argv[1:]:
    out = subprocess.run(["perf","report","-i",f,"--no-children","-g","none","--sort","dso,symbol","--stdio","-v"],capture_output=True,text=True).stdout
    lab = collections.defaultdict(float); top = []
    for l in out.splitlines():
        m = re.match(r"\s*([\d.]+)%\s+(\S+(?: tid \d+)?)\s+(0x[0-9a-f]+|\S+)?\s+\S?\s*\[(.)\]\s+(.*?)\s*(-\s+-\s*)?$", l)
        if not m: continue
        p = float(m.group(1)); d = m.group(2); s = m.group(5)
        key = "JIT" if d.startswith("[JIT]") else d.split("/")[-1]
        for name, pat in LABELS:
            if re.search(pat, s): lab[name] += p; break
        else:
            if not key.startswith(("JIT","libdnnl","libopenblas")): top.append((p, key, s[:90]))
    dso = collections.defaultdict(float)
    for l in subprocess.run(["perf","report","-i",f,"--no-children","-g","none","--sort","dso","--stdio"],capture_output=True,text=True).stdout.splitlines():
        m = re.match(r"\s*([\d.]+)%\s+(.*?)\s*$", l)
        if m:
            d = m.group(2); dso["JIT" if d.startswith("[JIT]") else d] += float(m.group(1))
    gemm = dso["JIT"] + sum(v for k,v in dso.items() if k.startswith(("libdnnl","libopenblas")))
    tot = sum(dso.values())
    kern = dso["[kernel.kallsyms]"]; libc = dso["libc.so.6"]
    cl = sum(v for k,v in dso.items() if k.startswith("cleave"))
    print(f"{f}: GEMM libraries {gemm:.1f}%, outside {tot-gemm:.1f}% (Cleave {cl:.1f}%, kernel {kern:.1f}%, libc {libc:.1f}%)")
    print("   " + ", ".join(f"{k} {v:.2f}%" for k,v in lab.items()))
    top.sort(reverse=True)
    print("   top other: " + "; ".join(f"{s.split('(')[0].split('::')[-1]} {p:.2f}" for p,k,s in top[:12]))
