#!/usr/bin/env python3
"""Training tokens/s on the CPU, Cleave against PyTorch, same machine, same run, interleaved (issue 39 part 5).

For each model, ROUNDS rounds; in each round every contender runs in turn (Cleave fp32, Cleave bf16, PyTorch
eager fp32, torch.compile fp32, PyTorch eager under bf16 autocast), so load drift on a shared machine hits all
alike. A contender's figure for a round is the median step time of its timed steps (after --warmup steps),
as tokens/s; the table gives the median over rounds and each contender's ratio to PyTorch eager.

Models (vocab 256, synthetic tokens, AdamW, gradient clipping at 1.0, like Cleave's runs):
  small  GPT d_model 256, 4 layers, 8 heads, T 64, batch 16 (the peer GPT of issue 39)
  large  GPT d_model 512, 8 layers, 8 heads, T 128, batch 16
  example  examples/gpt_fortunes.json's model (d 128, 4 layers, 4 heads, T 64, batch 16 in 2 micro-batches of 8)
  llama  examples/llama/config.json's model (d 128, 4 layers, 4 heads, 2 kv heads, T 64, batch 16 in 2
         micro-batches of 8) against transformers' LlamaForCausalLM (gradient accumulation of 2 as well)

The PyTorch GPT is GPT-2's block as nanoGPT writes it (pre-LN, tanh GELU, fused qkv, causal
scaled_dot_product_attention, tied embeddings), its weights normal(0, 0.02) and its biases 0 as Cleave's
(docs/models.md), so that both sides start near the uniform prediction.

Results first: before any timing, every contender trains one step (PyTorch in this process, Cleave as a
1-step run) and the first-step losses are printed and checked: every one within 0.25 of ln 256 (both start
near the uniform prediction; the two sides' weights and tokens differ, so only this is comparable between
them), torch.compile within 1e-3 of eager (the same weights and tokens), PyTorch bf16 autocast within 0.05
of eager, Cleave bf16 within 0.05 of Cleave fp32 (the same seed). A failed check stops the run before any
timing. Each Cleave run is a fresh `cleave train` process; its
figure is the median of metrics.jsonl's step_ms after the warm-up. PyTorch runs in this process with
torch.set_num_threads(THREADS); Cleave with CLEAVE_THREADS=THREADS and its own OMP_WAIT_POLICY choice
(printed). With --lock FILE the rounds run holding an exclusive flock on FILE (the shared build lock), so no
build runs beside the measurement; the lock is released between rounds once a hold passes --hold seconds.

Not part of CI (needs torch; transformers for llama):

    /work/venv-peers/bin/python benchmarks/peers/cpu_train_bench.py --cleave build/bin/cleave \
        --models small,large,llama --rounds 3 --lock /work/build.lock

Results: benchmarks/peers/RESULTS-<date>-cpu-train.md.
"""
import argparse
import contextlib
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from peer_util import held, median_seconds  # noqa: E402

MODELS = {
    "small": dict(family="gpt", d=256, layers=4, heads=8, T=64, batch=16, micro=16),
    "large": dict(family="gpt", d=512, layers=8, heads=8, T=128, batch=16, micro=16),
    "example": dict(family="gpt", d=128, layers=4, heads=4, T=64, batch=16, micro=8),
    "llama": dict(family="llama", d=128, layers=4, heads=4, kv_heads=2, T=64, batch=16, micro=8),
}
VOCAB = 256


class Block(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.fc, self.fc_proj = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=2)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, t, d)
        x = x + self.proj(a)
        return x + self.fc_proj(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class Gpt(nn.Module):
    def __init__(self, d, layers, heads, T):
        super().__init__()
        self.tok, self.pos = nn.Embedding(VOCAB, d), nn.Embedding(T, d)
        self.blocks = nn.ModuleList(Block(d, heads) for _ in range(layers))
        self.ln = nn.LayerNorm(d)
        self.head = nn.Linear(d, VOCAB, bias=False)
        self.head.weight = self.tok.weight  # tied, as Cleave's default
        for m in self.modules():
            if isinstance(m, (nn.Linear, nn.Embedding)):
                nn.init.normal_(m.weight, 0.0, 0.02)
            if isinstance(m, nn.Linear) and m.bias is not None:
                nn.init.zeros_(m.bias)

    def forward(self, idx, targets):
        x = self.tok(idx) + self.pos(torch.arange(idx.shape[1]))
        for blk in self.blocks:
            x = blk(x)
        logits = self.head(self.ln(x))
        return F.cross_entropy(logits.view(-1, VOCAB), targets.reshape(-1))


def build_torch(cfg, ffn):
    if cfg["family"] == "gpt":
        return Gpt(cfg["d"], cfg["layers"], cfg["heads"], cfg["T"])
    from transformers import LlamaConfig, LlamaForCausalLM
    lc = LlamaConfig(vocab_size=VOCAB, hidden_size=cfg["d"], intermediate_size=ffn, num_hidden_layers=cfg["layers"],
                     num_attention_heads=cfg["heads"], num_key_value_heads=cfg["kv_heads"],
                     max_position_embeddings=cfg["T"], rope_theta=10000.0, tie_word_embeddings=False,
                     attention_bias=False, mlp_bias=False)
    inner = LlamaForCausalLM(lc)
    inner.config._attn_implementation = "sdpa"

    class Wrap(nn.Module):
        def __init__(self):
            super().__init__()
            self.m = inner

        def forward(self, idx, targets):
            logits = self.m(input_ids=idx).logits
            return F.cross_entropy(logits.view(-1, VOCAB), targets.reshape(-1))
    return Wrap()


class TorchContender:
    def __init__(self, name, cfg, ffn, compile_model, autocast):
        torch.manual_seed(0)
        self.name, self.cfg, self.autocast = name, cfg, autocast
        self.model = build_torch(cfg, ffn)
        self.opt = torch.optim.AdamW(self.model.parameters(), lr=1e-3, weight_decay=0.01, foreach=True)
        self.fwd = torch.compile(self.model) if compile_model else self.model
        g = torch.Generator().manual_seed(1)
        self.x = torch.randint(0, VOCAB, (cfg["batch"], cfg["T"] + 1), generator=g)
        self.first_loss = None

    def step(self):
        micro = self.cfg["micro"]
        self.opt.zero_grad(set_to_none=True)
        total = 0.0
        for s in range(0, self.cfg["batch"], micro):
            idx, tgt = self.x[s:s + micro, :-1], self.x[s:s + micro, 1:]
            ctx = torch.autocast("cpu", dtype=torch.bfloat16) if self.autocast else contextlib.nullcontext()
            with ctx:
                loss = self.fwd(idx, tgt) * (micro / self.cfg["batch"])
            loss.backward()
            if self.first_loss is None:
                total += loss.item()
        if self.first_loss is None:
            self.first_loss = total
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
        self.opt.step()

    def run(self, warmup, steps):
        return median_seconds(self.step, warmup, steps), ""


def cleave_args(cfg, precision, steps):
    s = ["--set", f"model.type={cfg['family']}", "--set", f"model.d_model={cfg['d']}",
         "--set", f"model.n_layers={cfg['layers']}", "--set", f"model.n_heads={cfg['heads']}",
         "--set", f"model.seq_len={cfg['T']}", "--set", f"model.vocab_size={VOCAB}",
         "--set", f"batch.global_batch_size={cfg['batch']}", "--set", f"batch.micro_batch_size={cfg['micro']}",
         "--set", f"train.steps={steps}", "--set", "train.eval_batches=0", "--set", f"train.log_interval={steps}",
         "--set", "train.report=false", "--set", "checkpoint.save_final=false", "--set", f"device.precision={precision}"]
    if cfg["family"] == "llama":
        s += ["--set", f"model.n_kv_heads={cfg['kv_heads']}", "--set", "model.tie_embeddings=false"]
    return s


class CleaveContender:
    def __init__(self, name, binary, cfg, precision, threads, wait_policy=""):
        self.name, self.binary, self.cfg, self.precision, self.threads = name, binary, cfg, precision, threads
        self.wait_policy = wait_policy  # "": cleave's own choice; else exported as OMP_WAIT_POLICY
        self.first_loss = None

    def run(self, warmup, steps):
        with tempfile.TemporaryDirectory() as tmp:
            out = os.path.join(tmp, "run")
            env = dict(os.environ, CLEAVE_THREADS=str(self.threads))
            env.pop("OMP_WAIT_POLICY", None)
            if self.wait_policy:
                env["OMP_WAIT_POLICY"] = self.wait_policy
            r = subprocess.run([self.binary, "train", *cleave_args(self.cfg, self.precision, warmup + steps),
                                "--set", f"train.out_dir={out}"], env=env, capture_output=True, text=True)
            if r.returncode != 0:
                sys.exit(f"cleave {self.name} failed ({r.returncode}):\n{r.stderr[-3000:]}")
            rows = [json.loads(line) for line in open(os.path.join(out, "metrics.jsonl"))]
            if self.first_loss is None:
                self.first_loss = rows[0]["loss"]
            rows = rows[warmup:]
            if not rows:
                return 0.0, ""
            policy = ""
            for line in r.stderr.splitlines() + r.stdout.splitlines():
                if "OMP_WAIT_POLICY=" in line:
                    policy = line.split("OMP_WAIT_POLICY=")[1].split()[0]
                    break
            return statistics.median(row["step_ms"] for row in rows) / 1e3, policy


def cleave_ffn(binary, cfg):
    """The llama ffn size Cleave resolves (config.json of a 1-step run), so transformers gets the same."""
    if cfg["family"] != "llama":
        return 4 * cfg["d"]
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "run")
        subprocess.run([binary, "train", *cleave_args(cfg, "fp32", 1), "--set", f"train.out_dir={out}"],
                       check=True, capture_output=True)
        return json.load(open(os.path.join(out, "config.json")))["model"]["ffn_hidden_size"]


def check_first_losses(contenders):
    """Results first: the first-step losses (module header), printed; exits naming the failed check."""
    first = {c.name: c.first_loss for c in contenders}
    print("first-step loss: " + ", ".join(f"{n} {v:.4f}" for n, v in first.items()) + f" (ln 256 = {math.log(VOCAB):.4f})")
    bad = [f"{n} {v:.4f} is not within 0.25 of ln 256" for n, v in first.items() if abs(v - math.log(VOCAB)) > 0.25]
    for a, b, tol in (("torch_compile", "torch_eager", 1e-3), ("torch_bf16", "torch_eager", 0.05),
                      ("cleave_bf16", "cleave_fp32", 0.05), ("cleave_bf16_active", "cleave_fp32_active", 0.05)):
        if a in first and b in first and abs(first[a] - first[b]) > tol:
            bad.append(f"{a} {first[a]:.5f} against {b} {first[b]:.5f}: more than {tol} apart")
    if bad:
        sys.exit("first-step losses disagree, nothing timed:\n  " + "\n  ".join(bad))


def cpu_name():
    for line in open("/proc/cpuinfo"):
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cleave", required=True)
    ap.add_argument("--models", default="small,large,llama")
    ap.add_argument("--cleave-before", default="",
                    help="a second cleave binary (the code before a change): adds cleave_fp32_before, cleave_bf16_before")
    ap.add_argument("--contenders", default="cleave_fp32,cleave_bf16,torch_eager,torch_compile,torch_bf16",
                    help="also cleave_fp32_active, cleave_bf16_active: cleave with OMP_WAIT_POLICY=active exported "
                         "(its threads spin between parallel regions, as PyTorch's libgomp threads do by default)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--steps", type=int, default=20, help="timed steps per contender per round")
    ap.add_argument("--large-steps", type=int, default=8, help="timed steps for the large model")
    ap.add_argument("--lock", default="", help="flock this file while measuring (e.g. /work/build.lock)")
    ap.add_argument("--hold", type=float, default=300, help="release the lock after a round past this many s")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    print(f"# {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} | cpu: {cpu_name()} | {os.cpu_count()} cpus | "
          f"torch {torch.__version__} ({torch.backends.cpu.get_cpu_capability()}) | threads {a.threads}")
    print(subprocess.run([a.cleave, "version"], capture_output=True, text=True).stdout.strip().replace("\n", " | "))
    print(f"cleave: {a.cleave}; before: {a.cleave_before or '-'}; command: {' '.join(sys.argv)}")
    for model in a.models.split(","):
        cfg = MODELS[model]
        steps = a.large_steps if model == "large" else a.steps
        warmup = min(a.warmup, 3) if model == "large" else a.warmup
        ffn = cleave_ffn(a.cleave, cfg)
        tokens = cfg["batch"] * cfg["T"]
        contenders = []
        names = a.contenders.split(",")
        if a.cleave_before:
            names = ["cleave_fp32_before", "cleave_bf16_before"] + names
        for name in names:
            if name.startswith("cleave_"):
                binary = a.cleave_before if name.endswith("_before") else a.cleave
                policy = "active" if name.endswith("_active") else ""
                contenders.append(CleaveContender(name, binary, cfg, name.split("_")[1], a.threads, policy))
            else:
                contenders.append(TorchContender(name, cfg, ffn, name == "torch_compile", name == "torch_bf16"))
        print(f"\n## {model}: {cfg} ffn {ffn}, {tokens} tokens/step, warm-up {warmup}, timed {steps}", flush=True)
        for c in contenders:  # the first step (checked), compile and first touch outside the lock and the timing
            c.run(2 if isinstance(c, TorchContender) else 1, 0)
        check_first_losses(contenders)
        results = {c.name: [] for c in contenders}
        rnd = 0
        while rnd < a.rounds:  # as many rounds per hold of the lock as fit in --hold seconds
            with held(a.lock):
                t0 = time.time()
                while rnd < a.rounds:
                    r0 = time.time()
                    for c in contenders:
                        sec, note = c.run(warmup, steps)
                        results[c.name].append(tokens / sec)
                        print(f"round {rnd + 1} {c.name:14s} {tokens / sec:10.0f} tok/s {sec * 1e3:8.1f} ms/step "
                              f"{note}", flush=True)
                    rnd += 1
                    if time.time() - t0 + (time.time() - r0) > a.hold:
                        break
                print(f"held the lock {time.time() - t0:.0f} s", flush=True)
        base = statistics.median(results["torch_eager"]) if "torch_eager" in results else None
        print(f"\n| {model} | tokens/s (median of {a.rounds}) | rounds | x PyTorch eager |")
        print("| --- | ---: | --- | ---: |")
        for name, vals in results.items():
            med = statistics.median(vals)
            ratio = f"{med / base:.2f}" if base else "-"
            print(f"| {name} | {med:,.0f} | {', '.join(f'{v:,.0f}' for v in vals)} | {ratio} |")


if __name__ == "__main__":
    main()
