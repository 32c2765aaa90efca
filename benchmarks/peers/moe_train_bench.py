#!/usr/bin/env python3
"""Mixture-of-experts training tokens/s on the CPU, Cleave against PyTorch eager, same machine, same run,
interleaved (the moe counterpart of cpu_train_bench.py, written the same way: a fresh `cleave train` process per
Cleave run, timed by its metrics.jsonl step_ms; PyTorch in this process; the shared lock held per round).

For each model, ROUNDS rounds; in each round every contender runs in turn (Cleave fp32, Cleave bf16, PyTorch eager
fp32, the same with grouped experts, PyTorch eager under bf16 autocast; with --cleave-before each Cleave contender
also from a second binary, the code before a change: cleave_fp32_before, cleave_bf16_before), so load drift on a shared machine hits all alike. A contender's figure for
a round is the median step time of its timed steps (after --warmup steps), as tokens/s; the table gives the median
over rounds and each contender's ratio to PyTorch eager fp32.

Models (vocab 256, synthetic tokens, AdamW, gradient clipping at 1.0, aux loss coefficient 0.01, RMSNorm, rope):
  example  examples/moe/config.json's model: d 128, 4 layers, 4 heads, 2 kv heads, T 128, 8 experts of width 128,
           top-2, tied embeddings; batch 16 in 2 micro-batches of 8 (one rank: the example's dp 2 folded into
           gradient accumulation)
  large    d 256, 4 layers, 8 heads, 4 kv heads, T 128, 8 experts of width 512, top-2, untied; batch 16 in one
           micro-batch

PyTorch: transformers' MixtralForCausalLM (eager: its experts loop over the experts that received tokens, gather
their rows, one linear each for gate+up and down, index_add back) with the same shapes; contender torch_grouped is
the same model with transformers' "grouped_mm" experts (the rows sorted by expert, one grouped GEMM per
projection, as Cleave does); the loss its cross
entropy plus 0.01 × its load-balancing loss (output_router_logits). The two models start from different random
weights and see different tokens: only speed is compared here (the forward's equality with transformers on the
same weights is moe_vs_transformers.py's check); each side's first-step loss is printed (both ≈ ln 256 = 5.55 at
init plus the aux term) as a sanity check of the model sizes.

Not part of CI (needs torch and transformers, e.g. /work/venv-peers; `eval "$(benchmarks/peers/venv.sh env)"`):

    /work/venv-peers/bin/python benchmarks/peers/moe_train_bench.py --cleave build/bin/cleave \
        --models example,large --rounds 3 --lock /work/build.lock

Results: benchmarks/peers/RESULTS-<date>-moe-cpu.md.
"""
import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cpu_train_bench import cpu_name  # noqa: E402
from peer_util import held, median_seconds  # noqa: E402

MODELS = {
    "example": dict(d=128, layers=4, heads=4, kv_heads=2, T=128, ffn=128, experts=8, top_k=2, batch=16, micro=8,
                    tied=True),
    "large": dict(d=256, layers=4, heads=8, kv_heads=4, T=128, ffn=512, experts=8, top_k=2, batch=16, micro=16,
                  tied=False),
}
VOCAB = 256
AUX = 0.01


def build_torch(cfg, experts="eager"):
    from transformers import MixtralConfig, MixtralForCausalLM
    mc = MixtralConfig(vocab_size=VOCAB, hidden_size=cfg["d"], intermediate_size=cfg["ffn"],
                       num_hidden_layers=cfg["layers"], num_attention_heads=cfg["heads"],
                       num_key_value_heads=cfg["kv_heads"], num_local_experts=cfg["experts"],
                       num_experts_per_tok=cfg["top_k"], max_position_embeddings=cfg["T"], rope_theta=10000.0,
                       rms_norm_eps=1e-5, tie_word_embeddings=cfg["tied"], router_aux_loss_coef=AUX,
                       output_router_logits=True, sliding_window=None, bos_token_id=None, eos_token_id=None,
                       pad_token_id=None)
    model = MixtralForCausalLM(mc)
    model.config._attn_implementation = "sdpa"
    model.config._experts_implementation = experts
    return model


class TorchContender:
    def __init__(self, name, cfg, autocast, experts):
        torch.manual_seed(0)
        self.name, self.cfg, self.autocast = name, cfg, autocast
        self.model = build_torch(cfg, experts).train()
        self.opt = torch.optim.AdamW(self.model.parameters(), lr=1e-3, weight_decay=0.01, foreach=True)
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
                out = self.model(input_ids=idx)
                lm = F.cross_entropy(out.logits.float().view(-1, VOCAB), tgt.reshape(-1))
                loss = (lm + AUX * out.aux_loss) * (micro / self.cfg["batch"])
            loss.backward()
            total += lm.item() * micro / self.cfg["batch"]
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
        self.opt.step()
        if self.first_loss is None:
            self.first_loss = total

    def run(self, warmup, steps):
        return median_seconds(self.step, warmup, steps), ""


def cleave_args(cfg, precision, steps):
    sets = {"model.type": "moe", "model.d_model": cfg["d"], "model.n_layers": cfg["layers"],
            "model.n_heads": cfg["heads"], "model.n_kv_heads": cfg["kv_heads"], "model.seq_len": cfg["T"],
            "model.vocab_size": VOCAB, "model.ffn_hidden_size": cfg["ffn"], "model.n_experts": cfg["experts"],
            "model.top_k": cfg["top_k"], "model.router": "softmax", "model.normalize_top_k": "true",
            "model.aux_loss_coef": AUX, "model.tie_embeddings": str(cfg["tied"]).lower(),
            "batch.global_batch_size": cfg["batch"], "batch.micro_batch_size": cfg["micro"],
            "train.steps": steps, "train.eval_batches": 0, "train.log_interval": steps, "train.report": "false",
            "checkpoint.save_final": "false", "device.precision": precision}
    return [a for k, v in sets.items() for a in ("--set", f"{k}={v}")]


class CleaveContender:
    def __init__(self, name, binary, cfg, precision, threads):
        self.name, self.binary, self.cfg, self.precision, self.threads = name, binary, cfg, precision, threads
        self.first_loss = None

    def run(self, warmup, steps):
        with tempfile.TemporaryDirectory() as tmp:
            out = os.path.join(tmp, "run")
            env = dict(os.environ, CLEAVE_THREADS=str(self.threads))
            env.pop("OMP_WAIT_POLICY", None)
            r = subprocess.run([self.binary, "train", *cleave_args(self.cfg, self.precision, warmup + steps),
                                "--set", f"train.out_dir={out}"], env=env, capture_output=True, text=True)
            if r.returncode != 0:
                sys.exit(f"cleave {self.name} failed ({r.returncode}):\n{r.stderr[-3000:]}")
            rows = [json.loads(line) for line in open(os.path.join(out, "metrics.jsonl"))]
            if self.first_loss is None:
                self.first_loss = rows[0]["loss"]
            return statistics.median(row["step_ms"] for row in rows[warmup:]) / 1e3, ""


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cleave", required=True)
    ap.add_argument("--cleave-before", default="", help="a second cleave binary (the code before a change)")
    ap.add_argument("--models", default="example,large")
    ap.add_argument("--contenders", default="cleave_fp32,cleave_bf16,torch_eager,torch_grouped,torch_bf16")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--steps", type=int, default=10, help="timed steps per contender per round")
    ap.add_argument("--lock", default="", help="flock this file while measuring (e.g. /work/build.lock)")
    ap.add_argument("--hold", type=float, default=240, help="release the lock after a round past this many s")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    print(f"# {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} | cpu: {cpu_name()} | {os.cpu_count()} cpus | "
          f"torch {torch.__version__} ({torch.backends.cpu.get_cpu_capability()}) | threads {a.threads}")
    print(f"cleave: {a.cleave}; before: {a.cleave_before or '-'}; command: {' '.join(sys.argv)}")
    for model in a.models.split(","):
        cfg = MODELS[model]
        tokens = cfg["batch"] * cfg["T"]
        names = a.contenders.split(",")
        if a.cleave_before:
            names = [n + "_before" for n in names if n.startswith("cleave_")] + names
        contenders = []
        for name in names:
            if name.startswith("cleave_"):
                binary = a.cleave_before if name.endswith("_before") else a.cleave
                contenders.append(CleaveContender(name, binary, cfg, name.split("_")[1], a.threads))
            else:
                contenders.append(TorchContender(name, cfg, name == "torch_bf16",
                                                 "grouped_mm" if name == "torch_grouped" else "eager"))
        for c in contenders:  # first touch outside the lock and the timing
            if isinstance(c, TorchContender):
                c.run(1, 0)
        results = {c.name: [] for c in contenders}
        print(f"\n## {model}: {cfg}, {tokens} tokens/step, warm-up {a.warmup}, timed {a.steps}", flush=True)
        rnd = 0
        while rnd < a.rounds:
            with held(a.lock):
                t0 = time.time()
                while rnd < a.rounds:
                    r0 = time.time()
                    for c in contenders:
                        sec, _ = c.run(a.warmup, a.steps)
                        results[c.name].append(tokens / sec)
                        print(f"round {rnd + 1} {c.name:18s} {tokens / sec:10.0f} tok/s {sec * 1e3:8.1f} ms/step",
                              flush=True)
                    rnd += 1
                    if time.time() - t0 + (time.time() - r0) > a.hold:
                        break
                print(f"held the lock {time.time() - t0:.0f} s", flush=True)
        print("first-step loss (language model): " +
              ", ".join(f"{c.name} {c.first_loss:.3f}" for c in contenders if c.first_loss is not None))
        base = statistics.median(results["torch_eager"]) if "torch_eager" in results else None
        print(f"\n| {model} | tokens/s (median of {a.rounds}) | rounds | x PyTorch eager |")
        print("| --- | ---: | --- | ---: |")
        for name, vals in results.items():
            med = statistics.median(vals)
            ratio = f"{med / base:.2f}" if base else "-"
            print(f"| {name} | {med:,.0f} | {', '.join(f'{v:,.0f}' for v in vals)} | {ratio} |")


if __name__ == "__main__":
    main()
