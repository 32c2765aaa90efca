#!/usr/bin/env python3
"""The fine-tuning recipe of docs/models.md against Hugging Face: a tiny random LlamaForCausalLM made by
`transformers` and a SentencePiece-style (Llama 2 layout) tokenizer trained by `tokenizers`, saved with
save_pretrained as a downloaded model directory is, then Cleave's whole path on it:

  1. `cleave tokenize DOCS... --tokenizer MODEL/tokenizer.json --out shards`: each file's ids must equal
     `PreTrainedTokenizerFast.from_pretrained(MODEL)(text)["input_ids"]` (BOS from the tokenizer config);
  2. `mpiexec -n 4 cleave train --init-from MODEL` at model.seq_len --seq-len (below max_position_embeddings) at
     tp2 x pp2 on those shards;
  3. `cleave export --format hf`, then `AutoModelForCausalLM.from_pretrained(EXPORTED)` and
     `AutoTokenizer.from_pretrained(EXPORTED)`: the exported tokenizer encodes the prompt to the ids
     `cleave generate --tokenizer` used, and transformers' logits on them equal Cleave's (`cleave generate
     --logits` on the run's checkpoint) within --tolerance, while differing from the source model's (it trained);
  4. `cleave import EXPORTED` gives bit for bit the run's logits.

Not part of CI (needs torch, transformers, tokenizers; nothing is downloaded):

    /work/venv-peers/bin/python benchmarks/peers/finetune_check.py --cleave build/bin/cleave [--steps 20]

Exit status 0 when every check holds, 1 otherwise.
"""
import argparse
import glob
import json
import os
import shutil
import subprocess
import sys
import tempfile

os.environ["TOKENIZERS_PARALLELISM"] = "false"
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import sentencepiece_styles as sp  # noqa: E402
from peer_util import read_shard  # noqa: E402
import torch  # noqa: E402
from transformers import (AutoModelForCausalLM, AutoTokenizer, LlamaConfig, LlamaForCausalLM,  # noqa: E402
                          PreTrainedTokenizerFast)


def run(cmd, **kw):
    proc = subprocess.run(cmd, capture_output=True, text=True, **kw)
    if proc.returncode != 0:
        sys.exit(f"FAILED: {' '.join(cmd)}\n{proc.stdout}{proc.stderr}")
    return proc.stdout + proc.stderr


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cleave", default=os.path.join(sp.ROOT, "build", "bin", "cleave"))
    ap.add_argument("--mpiexec", default="mpiexec")
    ap.add_argument("--vocab", type=int, default=1000)
    ap.add_argument("--seq-len", type=int, default=32)
    ap.add_argument("--max-positions", type=int, default=128)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--prompt", default="The fine-tuning recipe: tokenize, train, export.")
    ap.add_argument("--tolerance", type=float, default=1e-4)
    a = ap.parse_args()
    cleave = os.path.abspath(a.cleave)
    work = tempfile.mkdtemp(prefix="finetune_check_")
    os.chdir(work)
    ok = True

    # The model directory, as save_pretrained writes it.
    corpus = os.path.join(work, "corpus.txt")
    open(corpus, "w", encoding="utf-8").write(sp.repo_text())
    tok = sp.style(sp.train_base(corpus, a.vocab), "llama2")
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", unk_token="<unk>")
    fast.save_pretrained("model")
    torch.manual_seed(35)
    cfg = LlamaConfig(vocab_size=tok.get_vocab_size(), hidden_size=64, intermediate_size=128, num_hidden_layers=4,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=a.max_positions,
                      rope_theta=10000.0, rms_norm_eps=1e-6, tie_word_embeddings=False, bos_token_id=1,
                      eos_token_id=2)
    source = LlamaForCausalLM(cfg).float().eval()
    source.save_pretrained("model")
    import tokenizers
    import transformers
    print(f"model: LlamaForCausalLM (transformers {transformers.__version__}), vocab {cfg.vocab_size}, "
          f"max_position_embeddings {a.max_positions}; tokenizer trained by tokenizers {tokenizers.__version__} "
          f"(Llama 2 style)")

    # 1. tokenize: each document's ids equal the Hugging Face tokenizer's (BOS included).
    docs = sorted(glob.glob(os.path.join(sp.ROOT, "docs", "*.md")))
    out = run([cleave, "tokenize", *docs, "--tokenizer", "model/tokenizer.json", "--out", "shards"])
    got = read_shard("shards/train.bin")
    hf = PreTrainedTokenizerFast.from_pretrained("model")
    want = []
    for d in docs:
        want += hf(open(d, encoding="utf-8").read())["input_ids"]
    same = got == want
    ok &= same
    print(f"tokenize: {len(docs)} documents, {len(got)} tokens: "
          f"{'identical to transformers, id for id' if same else 'MISMATCH'} ({out.splitlines()[0][:100]})")

    # 2. fine-tune at tp2 x pp2 from the directory at a shorter context.
    run([a.mpiexec, "--oversubscribe", "-n", "4", cleave, "train", "--init-from", "model",
         "--set", f"model.seq_len={a.seq_len}", "--set", "parallel.tensor_model_parallel_size=2",
         "--set", "parallel.pipeline_model_parallel_size=2", "--set", "data.type=tokens",
         "--set", "data.path=shards/train.bin", "--set", "data.val_fraction=0.05", "--set", "train.eval_batches=0",
         "--set", f"train.steps={a.steps}", "--set", "optimizer.lr=0.003", "--set", "train.out_dir=ft"])
    losses = [json.loads(line)["loss"] for line in open("ft/metrics.jsonl") if '"loss"' in line]
    print(f"train: tp2 x pp2, seq_len {a.seq_len} of {a.max_positions}, {a.steps} steps: loss {losses[0]:.4f} -> "
          f"{losses[-1]:.4f}")
    ok &= losses[-1] < losses[0]

    # 3. export, load with transformers, compare logits.
    run([cleave, "export", "ft/checkpoints", "--format", "hf", "--out", "exported"])
    run([cleave, "generate", "ft/checkpoints", "--tokenizer", "exported/tokenizer.json", "--prompt", a.prompt,
         "--tokens", "0", "--logits", "run.logits"])
    d = json.load(open("run.logits"))
    hf_out = AutoTokenizer.from_pretrained("exported")
    ids = hf_out(a.prompt)["input_ids"]  # with the BOS, as cleave generate puts it
    same_ids = ids == d["tokens"]
    ok &= same_ids
    model = AutoModelForCausalLM.from_pretrained("exported", dtype=torch.float32).eval()
    with torch.no_grad():
        theirs = model(torch.tensor([d["tokens"]])).logits[0]
        before = source(torch.tensor([d["tokens"]])).logits[0]
    ours = torch.tensor(d["logits"])
    diff = (theirs - ours).abs().max().item()
    moved = (before - ours).abs().max().item()
    ok &= diff <= a.tolerance and moved > 100 * a.tolerance
    print(f"export: transformers loads it ({type(model).__name__}, {len(os.listdir('exported'))} files: "
          f"{', '.join(sorted(os.listdir('exported')))})")
    print(f"logits: prompt ids {'equal' if same_ids else 'DIFFER from'} the exported tokenizer's ({len(ids)} ids); "
          f"{ours.shape[0]} positions x {ours.shape[1]}: max |cleave - transformers| = {diff:.3g} "
          f"(tolerance {a.tolerance}); moved {moved:.3g} from the source model's")

    # 4. re-import.
    run([cleave, "import", "exported", "--out", "back"])
    run([cleave, "generate", "back", "--tokenizer", "exported/tokenizer.json", "--prompt", a.prompt, "--tokens", "0",
         "--logits", "back.logits"])
    same_back = json.load(open("back.logits"))["logits"] == d["logits"]
    ok &= same_back
    print(f"re-import: logits {'bit for bit the run' if same_back else 'DIFFER from the run'}'s")
    src_cfg, out_cfg = json.load(open("model/config.json")), json.load(open("exported/config.json"))
    diff_keys = sorted(k for k in set(src_cfg) | set(out_cfg) if src_cfg.get(k) != out_cfg.get(k))
    print(f"config.json: exported differs from the source in {diff_keys}")
    shutil.rmtree(work, ignore_errors=True)
    print("ALL OK" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
