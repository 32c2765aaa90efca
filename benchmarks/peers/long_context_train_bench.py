#!/usr/bin/env python3
"""Long-context training tokens/s on the CPU, Cleave against PyTorch eager (SDPA): cpu_train_bench.py's machinery
(interleaved rounds, fresh `cleave train` processes, the same AdamW step, --lock) on examples/llama/config.json's
model (d 128, 4 layers, 4 heads, 2 kv heads) at sequence lengths where attention is most of the work:

  llama_t1024  T 1024, batch 4 in 2 micro-batches of 2 (4096 tokens a step)
  llama_t2048  T 2048, batch 2 in 2 micro-batches of 1 (4096 tokens a step)

Every option is cpu_train_bench.py's; only the model table grows, and --models defaults to the two above. Not
part of CI (needs torch and transformers):

    eval "$(benchmarks/peers/venv.sh env)"; $VENV/bin/python benchmarks/peers/long_context_train_bench.py \
        --cleave build/bin/cleave --contenders cleave_fp32,cleave_bf16,torch_eager,torch_bf16 \
        --rounds 3 --warmup 2 --steps 5 --lock /work/build.lock

Results: benchmarks/kernels/RESULTS-2026-11-30-attention-vs-torch.md.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cpu_train_bench  # noqa: E402

LONG = {
    "llama_t1024": dict(family="llama", d=128, layers=4, heads=4, kv_heads=2, T=1024, batch=4, micro=2),
    "llama_t2048": dict(family="llama", d=128, layers=4, heads=4, kv_heads=2, T=2048, batch=2, micro=1),
}

if __name__ == "__main__":
    cpu_train_bench.MODELS.update(LONG)
    if not any(arg == "--models" or arg.startswith("--models=") for arg in sys.argv):
        sys.argv += ["--models", ",".join(LONG)]
    cpu_train_bench.main()
