#!/usr/bin/env python3
"""GPT-2 124M training throughput on one GPU: Cleave against PyTorch eager and torch.compile (issue 25, part 7).

One model, one batch, one optimizer for every implementation, all read from the Cleave config
benchmarks/peers/gpt2_124m_gpu.json (vocab 50257, d_model 768, 12 layers, 12 heads, sequence 1024, tied
embeddings, batch 4 x 1024 tokens, AdamW at a constant lr 6e-4, betas (0.9, 0.95), weight decay 0.1 on matrices and the token
table, gradient clipping at 1.0, bf16 mixed precision with f32 master weights and optimizer state, random tokens):

  cleave        `cleave train` of that config on cuda:0 (bf16 working copies, f32 masters; attention through
                the stashed probabilities); run here with --cleave BIN, or read from a finished run's
                metrics.jsonl with --cleave-metrics FILE (scripts/gpu-check.sh runs cleave itself, in the
                bundle's library environment, and passes the file)
  eager         PyTorch eager, f32 parameters under torch.autocast(bfloat16), F.scaled_dot_product_attention
                (causal; PyTorch picks flash attention), fused AdamW
  eager-math    the same with attention written out (q k^T, causal mask, softmax, times v: the probabilities are
                materialised as in Cleave), to price flash attention against the probability stash
  compile       eager's model through torch.compile (default mode), fused AdamW

Timing: `--warmup` steps untimed (compilation and the caching allocators warm up there), then `--steps` timed
steps, each bracketed by CUDA events on the current stream (forward, backward, clipping, AdamW, zeroing); the
figure is the median step. tokens/s = batch x sequence / median step time.

MFU = tokens/s x FLOPs per token / peak, with FLOPs per token = 6 N + 12 L d T (PaLM, appendix B; nanoGPT's
estimate_mfu): N the parameters without the position table (the tied token table counted once: its use as the
output head is a real matmul), L layers, d model width, T sequence length; the attention term counts q k^T and
(softmax) v forward and backward without halving for causality. Peak: the GPU's dense bf16 tensor-core rate
(H100 SXM / H200 989.4 TFLOP/s, H100 NVL 835, H100 PCIe 756, A100 312), or --peak-tflops.

Prints one table and the ratios cleave / peer; --json FILE writes the same figures. Exit status: 0 when every
requested implementation ran, 1 when one failed, 3 (with the reason) when PyTorch or a CUDA device is missing.
A CPU smoke run of the code paths (not a benchmark): --device cpu --tiny.
"""
import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_CONFIG = os.path.join(HERE, "gpt2_124m_gpu.json")
PEAK_BF16_TFLOPS = [("H200", 989.4), ("H100 NVL", 835.0), ("H100 PCIe", 756.0), ("H100", 989.4), ("A100", 312.0)]


def load_shapes(path, tiny):
    with open(path) as f:
        c = json.load(f)
    m, b, o = c["model"], c["batch"], c["optimizer"]
    s = {"vocab": m["vocab_size"], "d": m["d_model"], "layers": m["n_layers"], "heads": m["n_heads"],
         "seq": m["seq_len"], "batch": b["micro_batch_size"], "lr": o["lr"], "betas": tuple(o["betas"]),
         "weight_decay": o["weight_decay"], "clip": o["grad_clip"]}
    if b["global_batch_size"] != b["micro_batch_size"]:
        sys.exit(f"{path}: the peers take one micro-batch per step (global_batch_size == micro_batch_size)")
    if tiny:
        s.update(vocab=97, d=32, layers=2, heads=4, seq=16, batch=2)
    return s


def flops_per_token(s):
    d, L, V, T = s["d"], s["layers"], s["vocab"], s["seq"]
    per_layer = 12 * d * d + 13 * d  # qkv, proj, fc, fc2 weights and biases, two LayerNorms
    n = V * d + L * per_layer + 2 * d  # token table (tied head), blocks, final LayerNorm; no position table
    return 6 * n + 12 * L * d * T, n


def peak_tflops(name, given):
    if given:
        return given
    for key, value in PEAK_BF16_TFLOPS:
        if key in name:
            return value
    return None


def build_model(torch, s, attention):
    nn, F = torch.nn, torch.nn.functional

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            d = s["d"]
            self.ln_1, self.ln_2 = nn.LayerNorm(d), nn.LayerNorm(d)
            self.c_attn, self.c_proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
            self.c_fc, self.c_fc2 = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

        def attend(self, x):
            B, T, C = x.shape
            h = s["heads"]
            q, k, v = self.c_attn(x).split(C, dim=2)
            q, k, v = (t.view(B, T, h, C // h).transpose(1, 2) for t in (q, k, v))
            if attention == "sdpa":
                y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            else:  # the probabilities materialised, as Cleave stashes them
                scores = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(C // h))
                mask = torch.ones(T, T, dtype=torch.bool, device=x.device).triu(1)
                y = scores.masked_fill(mask, float("-inf")).softmax(dim=-1) @ v
            return self.c_proj(y.transpose(1, 2).contiguous().view(B, T, C))

        def forward(self, x):
            x = x + self.attend(self.ln_1(x))
            return x + self.c_fc2(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))

    class Gpt(nn.Module):
        def __init__(self):
            super().__init__()
            self.wte, self.wpe = nn.Embedding(s["vocab"], s["d"]), nn.Embedding(s["seq"], s["d"])
            self.blocks = nn.ModuleList(Block() for _ in range(s["layers"]))
            self.ln_f = nn.LayerNorm(s["d"])
            for name, p in self.named_parameters():
                if p.dim() >= 2:
                    nn.init.normal_(p, std=0.02)
                elif "ln" in name:
                    nn.init.ones_(p) if name.endswith("weight") else nn.init.zeros_(p)
                else:
                    nn.init.zeros_(p)

        def forward(self, idx, targets):
            pos = torch.arange(idx.shape[1], device=idx.device)
            x = self.wte(idx) + self.wpe(pos)
            for block in self.blocks:
                x = block(x)
            logits = self.ln_f(x) @ self.wte.weight.t()  # tied head
            return F.cross_entropy(logits.view(-1, logits.shape[-1]).float(), targets.reshape(-1))

    return Gpt()


def run_torch(torch, s, mode, device, warmup, steps):
    torch.manual_seed(1)
    model = build_model(torch, s, "math" if mode == "eager-math" else "sdpa").to(device)
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2 and not n.startswith("wpe")]
    rest = [p for n, p in model.named_parameters() if p.dim() < 2 or n.startswith("wpe")]
    fused = device.type == "cuda"
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": s["weight_decay"]}, {"params": rest, "weight_decay": 0.0}],
                            lr=s["lr"], betas=s["betas"], fused=fused)
    step_model = torch.compile(model) if mode == "compile" else model
    gen = torch.Generator(device=device).manual_seed(2)
    batches = [torch.randint(0, s["vocab"], (s["batch"], s["seq"] + 1), device=device, generator=gen) for _ in range(4)]
    autocast = torch.autocast(device_type=device.type, dtype=torch.bfloat16)
    times, losses = [], []
    t_first = time.time()
    for i in range(warmup + steps):
        data = batches[i % len(batches)]
        if device.type == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
        else:
            t0 = time.perf_counter()
        with autocast:
            loss = step_model(data[:, :-1], data[:, 1:])
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), s["clip"])
        opt.step()
        opt.zero_grad(set_to_none=True)
        if device.type == "cuda":
            end.record()
            if i >= warmup:
                times.append((start, end))
        elif i >= warmup:
            times.append(time.perf_counter() - t0)
        losses.append(loss.detach())
        if i + 1 == warmup:
            t_first = time.time() - t_first
    if device.type == "cuda":
        torch.cuda.synchronize()
        ms = [a.elapsed_time(b) for a, b in times]
    else:
        ms = [1e3 * t for t in times]
    loss_values = [float(v) for v in losses]
    if not all(math.isfinite(v) for v in loss_values):
        raise RuntimeError(f"{mode}: non-finite loss {loss_values}")
    return {"median_step_ms": statistics.median(ms), "min_step_ms": min(ms), "warmup_s": t_first,
            "first_loss": loss_values[0], "last_loss": loss_values[-1]}


def cleave_metrics(path, warmup):
    rows = [json.loads(line) for line in open(path) if line.strip()]
    timed = [r["step_ms"] for r in rows if r["step"] > warmup]
    if not timed:
        raise RuntimeError(f"{path}: no step after the {warmup} warm-up steps")
    return {"median_step_ms": statistics.median(timed), "min_step_ms": min(timed), "first_loss": rows[0]["loss"],
            "last_loss": rows[-1]["loss"], "timed_steps": len(timed)}


def run_cleave(binary, config, warmup, steps, tiny, device):
    out = tempfile.mkdtemp(prefix="cleave-gpt2-bench.")
    args = [binary, "train", config, "--set", f"train.steps={warmup + steps}", "--set", f"train.out_dir={out}"]
    if tiny:
        args += ["--set", "model.vocab_size=97", "--set", "model.d_model=32", "--set", "model.n_layers=2",
                 "--set", "model.n_heads=4", "--set", "model.seq_len=16", "--set", "batch.global_batch_size=2",
                 "--set", "batch.micro_batch_size=2"]
    if device != "cuda":
        args += ["--set", f"device.type={device}"]
    proc = subprocess.run(args, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"cleave train exited {proc.returncode}: {(proc.stdout + proc.stderr)[-1500:]}")
    return cleave_metrics(os.path.join(out, "metrics.jsonl"), warmup)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--config", default=DEFAULT_CONFIG)
    ap.add_argument("--modes", default="cleave,eager,eager-math,compile")
    ap.add_argument("--cleave", help="the cleave binary to run (mode cleave)")
    ap.add_argument("--cleave-metrics", help="metrics.jsonl of a finished `cleave train` of --config (mode cleave)")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--peak-tflops", type=float)
    ap.add_argument("--deadline-s", type=float, default=0, help="skip a mode that would start after this many seconds "
                    "(compile needs 90 s of what is left)")
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    ap.add_argument("--tiny", action="store_true", help="tiny shapes: a smoke run of the code paths, not a benchmark")
    ap.add_argument("--json")
    a = ap.parse_args()
    t_start = time.time()
    s = load_shapes(a.config, a.tiny)
    modes = [m for m in a.modes.split(",") if m]
    try:
        import torch
    except ImportError as e:
        print(f"gpt2_gpu_bench: skipped: PyTorch is not importable ({e})")
        return 3
    if a.device == "cuda" and not torch.cuda.is_available():
        print(f"gpt2_gpu_bench: skipped: torch {torch.__version__} sees no CUDA device")
        return 3
    device = torch.device(a.device)
    gpu = torch.cuda.get_device_name(0) if a.device == "cuda" else "cpu"
    peak = peak_tflops(gpu, a.peak_tflops)
    fpt, n_params = flops_per_token(s)
    tokens = s["batch"] * s["seq"]
    print(f"gpt2_gpu_bench: {gpu}, torch {torch.__version__}, CUDA {torch.version.cuda}; GPT-2 "
          f"V={s['vocab']} d={s['d']} L={s['layers']} H={s['heads']} T={s['seq']}, batch {s['batch']} "
          f"({tokens} tokens/step), bf16 autocast, AdamW; {a.warmup} warm-up + {a.steps} timed steps")
    print(f"MFU = tokens/s x (6 N + 12 L d T) / peak; N = {n_params / 1e6:.2f} M (no position table), "
          f"{fpt / 1e9:.3f} GFLOP/token; peak {peak if peak else 'unknown (pass --peak-tflops)'} TFLOP/s bf16 dense")
    results, failed = {}, 0
    for mode in modes:
        left = a.deadline_s - (time.time() - t_start) if a.deadline_s else float("inf")
        need = 90 if mode == "compile" else 15
        if left < need:
            results[mode] = {"skipped": f"{left:.0f} s left of --deadline-s, {mode} needs about {need} s"}
            continue
        try:
            if mode == "cleave":
                if a.cleave_metrics:
                    r = cleave_metrics(a.cleave_metrics, a.warmup)
                elif a.cleave:
                    r = run_cleave(a.cleave, a.config, a.warmup, a.steps, a.tiny, a.device)
                else:
                    results[mode] = {"skipped": "neither --cleave nor --cleave-metrics given"}
                    continue
            elif mode in ("eager", "eager-math", "compile"):
                r = run_torch(torch, s, mode, device, a.warmup, a.steps)
                if a.device == "cuda":
                    torch.cuda.empty_cache()
            else:
                raise ValueError(f"unknown mode {mode} (cleave, eager, eager-math, compile)")
        except Exception as e:  # report and go on: one implementation failing must not hide the others
            failed = 1
            results[mode] = {"error": f"{type(e).__name__}: {e}"[:600]}
            continue
        r["tokens_per_s"] = tokens / (r["median_step_ms"] * 1e-3)
        r["mfu"] = r["tokens_per_s"] * fpt / (peak * 1e12) if peak else None
        results[mode] = r
    print(f"{'implementation':<14} {'step ms':>9} {'min ms':>8} {'tokens/s':>10} {'MFU':>7}  loss first -> last")
    for mode, r in results.items():
        if "median_step_ms" not in r:
            print(f"{mode:<14} {r.get('error') or 'skipped: ' + r['skipped']}")
            continue
        mfu = f"{100 * r['mfu']:6.1f}%" if r["mfu"] is not None else "    n/a"
        print(f"{mode:<14} {r['median_step_ms']:9.2f} {r['min_step_ms']:8.2f} {r['tokens_per_s']:10.0f} {mfu}  "
              f"{r['first_loss']:.4f} -> {r['last_loss']:.4f}")
    ratios = {}
    if "tokens_per_s" in results.get("cleave", {}):
        for mode, r in results.items():
            if mode != "cleave" and "tokens_per_s" in r:
                ratios[mode] = results["cleave"]["tokens_per_s"] / r["tokens_per_s"]
        print("cleave tokens/s over " + ", ".join(f"{m} {v:.3f}" for m, v in ratios.items()))
    parts = [f"{m} {r['tokens_per_s']:.0f} tok/s" + (f" MFU {100 * r['mfu']:.1f}%" if r["mfu"] is not None else "")
             for m, r in results.items() if "tokens_per_s" in r]
    parts += [f"{m}: {r.get('error') or 'skipped'}"[:80] for m, r in results.items() if "tokens_per_s" not in r]
    print("figure: " + "; ".join(parts) + ("; cleave/" + ", cleave/".join(f"{m} {v:.2f}" for m, v in ratios.items())
                                           if ratios else ""))
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"gpu": gpu, "torch": torch.__version__, "shapes": s, "flops_per_token": fpt,
                       "params_without_position_table": n_params, "peak_tflops": peak, "results": results,
                       "cleave_over": ratios}, f, indent=1)
    return failed


if __name__ == "__main__":
    sys.exit(main())
