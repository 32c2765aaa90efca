#!/usr/bin/env python3
"""Pipeline parallelism on one CPU node: Cleave pp2 (MPI, 2 ranks x 1 thread) against
torch.distributed.pipelining (gloo, 2 processes x 1 thread), same model, same schedule, interleaved rounds
(issue 39 part 5).

Model: the small peer GPT (d_model 256, 4 layers, 8 heads, T 64, vocab 256), global batch 16 in 4
micro-batches of 4, schedule 1F1B, AdamW; stage 0 = embeddings + blocks 0-1, stage 1 = blocks 2-3 + final
LayerNorm + head + loss. The PyTorch model unties the head from the embedding (a tied weight across two stages
needs its own gradient exchange, which torch's pipelining leaves to the user) and clips each stage's gradients
by its own norm; Cleave ties them (its default) and clips by the global norm. Both are small against the step.
Each figure is a round's median step time (after --warmup steps) as tokens/s; the table gives the median of
the rounds. With --lock FILE each round holds an exclusive flock on FILE.

    eval "$(benchmarks/peers/venv.sh env)"
    $VENV/bin/python benchmarks/peers/pp2_bench.py --cleave build/bin/cleave --rounds 3 --lock /work/build.lock
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from peer_util import held  # noqa: E402

D, LAYERS, HEADS, T, VOCAB, BATCH, MICRO = 256, 4, 8, 64, 256, 16, 4


def torch_worker(rank, port, warmup, steps, out_path):
    import torch
    import torch.distributed as dist
    import torch.nn as nn
    from torch.distributed.pipelining import PipelineStage, Schedule1F1B

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from cpu_train_bench import Block

    torch.set_num_threads(1)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=2)
    torch.manual_seed(0)

    class First(nn.Module):
        def __init__(self):
            super().__init__()
            self.tok, self.pos = nn.Embedding(VOCAB, D), nn.Embedding(T, D)
            self.blocks = nn.ModuleList(Block(D, HEADS) for _ in range(LAYERS // 2))

        def forward(self, idx):
            x = self.tok(idx) + self.pos(torch.arange(idx.shape[1]))
            for b in self.blocks:
                x = b(x)
            return x

    class Last(nn.Module):
        def __init__(self):
            super().__init__()
            self.blocks = nn.ModuleList(Block(D, HEADS) for _ in range(LAYERS // 2))
            self.ln, self.head = nn.LayerNorm(D), nn.Linear(D, VOCAB, bias=False)

        def forward(self, x):
            for b in self.blocks:
                x = b(x)
            return self.head(self.ln(x))

    module = First() if rank == 0 else Last()
    example = (torch.zeros(MICRO, T, dtype=torch.long),) if rank == 0 else (torch.zeros(MICRO, T, D),)
    stage = PipelineStage(module, rank, 2, torch.device("cpu"), input_args=example)

    def loss_fn(logits, target):
        return nn.functional.cross_entropy(logits.reshape(-1, VOCAB), target.reshape(-1))

    schedule = Schedule1F1B(stage, n_microbatches=BATCH // MICRO, loss_fn=loss_fn)
    opt = torch.optim.AdamW(module.parameters(), lr=1e-3, weight_decay=0.01, foreach=True)
    g = torch.Generator().manual_seed(1)
    data = torch.randint(0, VOCAB, (BATCH, T + 1), generator=g)
    times = []
    for step in range(warmup + steps):
        dist.barrier()
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        if rank == 0:
            schedule.step(data[:, :-1].contiguous())
        else:
            schedule.step(target=data[:, 1:].contiguous())
        torch.nn.utils.clip_grad_norm_(module.parameters(), 1.0)
        opt.step()
        dist.barrier()
        if step >= warmup:
            times.append(time.perf_counter() - t0)
    if rank == 0:
        with open(out_path, "w") as f:
            json.dump(times, f)
    dist.destroy_process_group()


def run_torch(warmup, steps):
    import torch.multiprocessing as mp
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "times.json")
        port = 29500 + os.getpid() % 1000
        mp.spawn(torch_worker, args=(port, warmup, steps, out), nprocs=2, join=True)
        return statistics.median(json.load(open(out)))


def run_cleave(binary, warmup, steps):
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "run")
        env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", CLEAVE_THREADS="1",
                   OMPI_MCA_btl_vader_single_copy_mechanism="none")
        env.pop("OMP_WAIT_POLICY", None)
        args = ["--set", f"model.d_model={D}", "--set", f"model.n_layers={LAYERS}", "--set", f"model.n_heads={HEADS}",
                "--set", f"model.seq_len={T}", "--set", f"batch.global_batch_size={BATCH}",
                "--set", f"batch.micro_batch_size={MICRO}", "--set", "parallel.pipeline_model_parallel_size=2",
                "--set", "parallel.schedule=1f1b", "--set", f"train.steps={warmup + steps}",
                "--set", "train.eval_batches=0", "--set", "train.report=false", "--set", "checkpoint.save_final=false",
                "--set", f"train.log_interval={warmup + steps}", "--set", f"train.out_dir={out}"]
        r = subprocess.run(["mpirun", "-np", "2", "--oversubscribe", "--mca", "btl", "self,vader", binary, "train",
                            *args], env=env, capture_output=True, text=True)
        if r.returncode != 0:
            sys.exit(f"cleave pp2 failed ({r.returncode}):\n{r.stderr[-3000:]}")
        rows = [json.loads(line) for line in open(os.path.join(out, "metrics.jsonl"))][warmup:]
        return statistics.median(row["step_ms"] for row in rows) / 1e3


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cleave", required=True)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--lock", default="")
    a = ap.parse_args()
    import torch
    print(f"# {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} | torch {torch.__version__} | pp2, 2 x 1 thread, "
          f"1F1B, {BATCH // MICRO} micro-batches of {MICRO} x {T} tokens")
    tokens = BATCH * T
    res = {"cleave_pp2": [], "torch_pp2": []}
    for rnd in range(a.rounds):
        with held(a.lock):
            t0 = time.time()
            for name in res:
                sec = run_cleave(a.cleave, a.warmup, a.steps) if name == "cleave_pp2" else run_torch(a.warmup, a.steps)
                res[name].append(tokens / sec)
                print(f"round {rnd + 1} {name:12s} {tokens / sec:10.0f} tok/s {sec * 1e3:8.1f} ms/step", flush=True)
            print(f"round {rnd + 1} held the lock {time.time() - t0:.0f} s", flush=True)
    base = statistics.median(res["torch_pp2"])
    print(f"\n| pp2 | tokens/s (median of {a.rounds}) | rounds | x torch pipelining |")
    print("| --- | ---: | --- | ---: |")
    for name, vals in res.items():
        med = statistics.median(vals)
        print(f"| {name} | {med:,.0f} | {', '.join(f'{v:,.0f}' for v in vals)} | {med / base:.2f} |")


if __name__ == "__main__":
    main()
