#!/usr/bin/env python3
"""The fine-tuning journey of docs/models.md for every Hugging Face family Cleave imports, as a user who
downloaded a checkpoint walks it, against transformers (not CI: it needs torch, transformers and tokenizers from
PyPI; nothing is downloaded). Per family (Llama, Mistral, Qwen2, Qwen3, Mixtral, Qwen3-MoE, Qwen2-MoE, GPT-2) a
tiny random model made from a config and saved with save_pretrained beside a tokenizer.json trained here
(SentencePiece-style for the Llama-like ones, byte-level BPE for Qwen and GPT-2), with the variants downloads have
(bf16 weights, weights sharded under model.safetensors.index.json, an embedding padded past the tokenizer's
vocabulary, tied and untied heads, a sliding window):

  1. `cleave import`: `cleave generate --tokenizer MODEL/tokenizer.json --logits` equals transformers' logits;
  2. `cleave tokenize` the repository's docs with MODEL/tokenizer.json: ids equal transformers' tokenizer's;
  3. `cleave train --init-from MODEL` at model.seq_len --seq-len below max_position_embeddings on 1 rank, tp2, pp2
     (and ep2 for the mixtures; mpiexec -n 2 --oversubscribe): the first step's loss agrees with one rank's;
  4. `--resume`: a run stopped after half its steps and resumed logs the uninterrupted run's losses bit for bit;
  5. `cleave export --format hf` of the tp2 run: from_pretrained loads it, its logits equal Cleave's on the run's
     checkpoint (`cleave generate --tokenizer EXPORTED/tokenizer.json --logits`), AutoTokenizer gives the same
     prompt ids, and `cleave generate --tokens 8` prints text;
  6. user mistakes, each refused before any work with one error naming the key or file: a config whose dims
     disagree with the checkpoint, shards tokenized with another model's tokenizer, a tokenizer.json with a part
     Cleave does not read, rope_scaling (llama3, yarn, linear), sliding_window on a Llama.

    /work/venv-peers/bin/python benchmarks/peers/finetune_families.py --cleave build/bin/cleave [--only llama,gpt2]

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
import transformers  # noqa: E402
from tokenizers import Tokenizer, models, pre_tokenizers, decoders, trainers  # noqa: E402
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedTokenizerFast  # noqa: E402

PROMPT = "Fine-tuning a downloaded model: tokenize, train, export."
FAILURES = []


def check(ok, what):
    print(f"  {'PASS' if ok else 'FAIL'} {what}", flush=True)
    if not ok:
        FAILURES.append(what)
    return ok


def run(cmd, expect_ok=True):
    proc = subprocess.run(cmd, capture_output=True, text=True, errors="replace")
    text = proc.stdout + proc.stderr
    if expect_ok and proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}\n{text[-3000:]}")
    return proc.returncode, text


# ---- tokenizers -------------------------------------------------------------------------------------------------

def sentencepiece_tokenizer(corpus, vocab):
    tok = sp.style(sp.train_base(corpus, vocab), "llama2")
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", unk_token="<unk>")


def byte_level_tokenizer(corpus, vocab, eos):
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab, special_tokens=[eos], show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train([corpus], trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token=eos, bos_token=None)


# ---- models -----------------------------------------------------------------------------------------------------

def llama_dims(vocab, max_pos, tied):
    return dict(vocab_size=vocab, hidden_size=64, intermediate_size=96, num_hidden_layers=4, num_attention_heads=4,
                num_key_value_heads=2, max_position_embeddings=max_pos, rms_norm_eps=1e-6, tie_word_embeddings=tied,
                initializer_range=0.1)


def moe_dims(vocab, max_pos, tied):
    d = llama_dims(vocab, max_pos, tied)
    d.update(num_experts_per_tok=2)
    return d


def make_model(family, vocab, max_pos, tok_ids):
    """The model (eval, fp32) and whether its head is tied; `vocab` may exceed the tokenizer's (padding)."""
    torch.manual_seed(35)
    T = transformers
    ids = dict(bos_token_id=tok_ids.get("bos"), eos_token_id=tok_ids.get("eos"), pad_token_id=None)
    if family == "llama":
        m = T.LlamaForCausalLM(T.LlamaConfig(**llama_dims(vocab, max_pos, False), rope_theta=10000.0, **ids))
    elif family == "mistral":
        m = T.MistralForCausalLM(T.MistralConfig(**llama_dims(vocab, max_pos, False), sliding_window=8, **ids))
    elif family == "qwen2":
        m = T.Qwen2ForCausalLM(T.Qwen2Config(**llama_dims(vocab, max_pos, True), rope_theta=1e6, **ids))
    elif family == "qwen3":
        m = T.Qwen3ForCausalLM(T.Qwen3Config(**llama_dims(vocab, max_pos, True), head_dim=16, rope_theta=1e6, **ids))
    elif family == "mixtral":
        m = T.MixtralForCausalLM(T.MixtralConfig(**moe_dims(vocab, max_pos, False), num_local_experts=4,
                                                 sliding_window=None, **ids))
    elif family == "qwen3_moe":
        m = T.Qwen3MoeForCausalLM(T.Qwen3MoeConfig(**moe_dims(vocab, max_pos, False), head_dim=16,
                                                   moe_intermediate_size=48, num_experts=4, norm_topk_prob=True, **ids))
    elif family == "qwen2_moe":
        m = T.Qwen2MoeForCausalLM(T.Qwen2MoeConfig(**moe_dims(vocab, max_pos, True), moe_intermediate_size=48,
                                                   shared_expert_intermediate_size=96, num_experts=4,
                                                   norm_topk_prob=False, **ids))
    elif family == "gpt2":
        m = T.GPT2LMHeadModel(T.GPT2Config(vocab_size=vocab, n_positions=max_pos, n_embd=64, n_layer=3, n_head=4,
                                           initializer_range=0.1, bos_token_id=tok_ids.get("eos"),
                                           eos_token_id=tok_ids.get("eos")))
    else:
        raise ValueError(family)
    with torch.no_grad():  # biases and norm scales away from their zero / one initialisation
        for name, p in m.named_parameters():
            if name.endswith("bias") or "norm" in name or ".ln_" in name:
                p.add_(0.1 * torch.randn_like(p))
    return m.float().eval()


# Per family: the tokenizer kind, vocabulary padding rows, how the weights are saved.
FAMILIES = {
    "llama": dict(tok="sp", pad=0, save=dict()),
    "mistral": dict(tok="sp", pad=0, save=dict(max_shard_size="100KB")),
    "qwen2": dict(tok="bl", pad=45, save=dict()),
    "qwen3": dict(tok="bl", pad=13, save=dict(dtype=torch.bfloat16, max_shard_size="100KB")),
    "mixtral": dict(tok="sp", pad=0, save=dict(dtype=torch.bfloat16)),
    "qwen3_moe": dict(tok="bl", pad=21, save=dict()),
    "qwen2_moe": dict(tok="bl", pad=0, save=dict(max_shard_size="200KB")),
    "gpt2": dict(tok="bl", pad=0, save=dict()),
}
MOE = {"mixtral", "qwen3_moe", "qwen2_moe"}


def save_model(model, fast, spec, path):
    if "dtype" in spec["save"]:
        model = model.to(spec["save"]["dtype"])
    model.save_pretrained(path, max_shard_size=spec["save"].get("max_shard_size", "5GB"))
    fast.save_pretrained(path)
    # The reference is what a user loads: the saved weights in fp32 (bf16 values exactly; the rotary buffers
    # recomputed in fp32, not the bf16 ones model.to(bf16) had rounded).
    return AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()


# ---- the journey ------------------------------------------------------------------------------------------------

def cleave_logits(a, ckpt, tokenizer, out, prompt=PROMPT):
    run([a.cleave, "generate", ckpt, "--tokenizer", tokenizer, "--prompt", prompt, "--tokens", "0", "--logits", out])
    d = json.load(open(out))
    return d["tokens"], torch.tensor(d["logits"], dtype=torch.float64)


def hf_logits(model, tokens):
    with torch.no_grad():
        return model(torch.tensor([tokens])).logits[0].double()


def losses(run_dir):
    return [json.loads(line)["loss"] for line in open(os.path.join(run_dir, "metrics.jsonl")) if '"loss"' in line]


def train(a, model_dir, out, ranks, extra):
    cmd = [a.cleave, "train", "--init-from", model_dir, "--set", f"model.seq_len={a.seq_len}",
           "--set", "data.type=tokens", "--set", "data.path=shards/train.bin", "--set", "data.val_path=shards/val.bin",
           "--set", "train.eval_batches=0", "--set", "optimizer.lr=0.003", "--set", f"train.out_dir={out}",
           "--set", "train.deterministic=true", "--set", "batch.global_batch_size=8"] + extra
    if ranks > 1:
        cmd = [a.mpiexec, "--allow-run-as-root", "--oversubscribe", "-n", str(ranks)] + cmd
    return run(cmd)


def journey(a, family, corpus, docs, work):
    spec = FAMILIES[family]
    print(f"{family}:", flush=True)
    d = os.path.join(work, family)
    os.makedirs(d)
    os.chdir(d)
    fast = (sentencepiece_tokenizer(corpus, 600) if spec["tok"] == "sp"
            else byte_level_tokenizer(corpus, 700, "<|endoftext|>"))
    tok_vocab = len(fast)
    tok_ids = {"bos": fast.bos_token_id, "eos": fast.eos_token_id}
    model = save_model(make_model(family, tok_vocab + spec["pad"], a.max_positions, tok_ids), fast, spec, "model")
    tied = model.config.tie_word_embeddings
    files = sorted(os.listdir("model"))
    print(f"  model: {type(model).__name__}, vocab {model.config.vocab_size} (tokenizer {tok_vocab}), "
          f"{'tied' if tied else 'untied'}, weights {[f for f in files if 'safetensors' in f]}", flush=True)

    # 1. import
    run([a.cleave, "import", "model", "--out", "imported"])
    tokens, ours = cleave_logits(a, "imported", "model/tokenizer.json", "import.logits")
    hf_ids = fast(PROMPT)["input_ids"]  # with the BOS, as cleave generate puts it
    check(tokens == hf_ids, f"prompt ids equal transformers' ({len(tokens)} ids)")
    diff = (hf_logits(model, tokens) - ours).abs().max().item()
    check(diff <= a.tolerance, f"import: logits {tuple(ours.shape)}, max |cleave - transformers| = {diff:.3g}")

    # 2. tokenize
    run([a.cleave, "tokenize", *docs, "--tokenizer", "model/tokenizer.json", "--out", "shards",
         "--val-fraction", "0.05"])
    got = read_shard("shards/train.bin") + read_shard("shards/val.bin")
    want = []
    for doc in docs:
        want += fast(open(doc, encoding="utf-8").read())["input_ids"]
    check(got == want, f"tokenize: {len(docs)} documents, {len(got)} ids, equal transformers'")

    # 3. train on 1 rank, tp2, pp2 (ep2)
    steps = ["--set", f"train.steps={a.steps}"]
    train(a, "model", "r1", 1, steps)
    base = losses("r1")
    check(all(x == x for x in base), f"1 rank: seq_len {a.seq_len} of {a.max_positions}, {a.steps} steps, loss "
          f"{base[0]:.4f} -> {base[-1]:.4f}")
    layouts = {"tp2": ["--set", "parallel.tensor_model_parallel_size=2"],
               "pp2": ["--set", "parallel.pipeline_model_parallel_size=2"]}
    if family in MOE:
        layouts["ep2"] = ["--set", "parallel.expert_model_parallel_size=2", "--set", "parallel.data_parallel_size=2"]
    for name, extra in layouts.items():
        train(a, "model", name, 2, steps + extra)
        got = losses(name)
        first = abs(got[0] - base[0])
        worst = max(abs(x - y) for x, y in zip(got, base))
        # The first step's loss is the same weights on the same batch; later steps follow from gradients summed in
        # another order (ep2 runs dp2), which can flip a near-tie in a router's top-k, hence the looser bound.
        check(len(got) == len(base) and first <= 1e-5 * abs(base[0]) and worst <= 2e-3,
              f"{name}: first-step loss within {first:.2g} of 1 rank's, all {len(got)} within {worst:.2g}")

    # 4. resume: the run's own command line with --resume auto, launched twice (as cleave run restarts it)
    half = a.steps // 2
    try:
        train(a, "model", "rs", 1, ["--set", f"train.steps={half}", "--resume", "auto"])
        train(a, "model", "rs", 1, steps + ["--resume", "auto"])
        check(losses("rs") == base, f"--init-from + --resume auto, stopped after {half} of {a.steps} steps: the "
              f"uninterrupted run's losses bit for bit ({len(losses('rs'))} logged)")
    except RuntimeError as e:
        check(False, f"--init-from + --resume auto: {str(e)[-300:]}")

    # 5. export the tp2 run, load it in transformers
    run([a.cleave, "export", "tp2/checkpoints", "--format", "hf", "--out", "exported"])
    # A rotary model serves its whole context (max_position_embeddings) after a fine-tune at a shorter one, in
    # transformers and in cleave generate; GPT-2's learned position table was sliced to seq_len rows.
    prompt = PROMPT if family != "gpt2" else PROMPT[:20]
    tokens, ours = cleave_logits(a, "tp2/checkpoints", "exported/tokenizer.json", "run.logits", prompt)
    exported = AutoModelForCausalLM.from_pretrained("exported", dtype=torch.float32).eval()
    theirs = hf_logits(exported, tokens)
    diff = (theirs - ours).abs().max().item()
    moved = (hf_logits(model, tokens) - ours).abs().max().item()
    check(diff <= a.tolerance and moved > 100 * a.tolerance,
          f"export: {type(exported).__name__} loads; max |cleave - transformers| = {diff:.3g}, moved {moved:.3g} "
          f"from the source")
    ids = AutoTokenizer.from_pretrained("exported")(prompt)["input_ids"]
    check(ids == tokens, "export: AutoTokenizer gives the prompt ids cleave generate used")
    src_cfg, out_cfg = json.load(open("model/config.json")), json.load(open("exported/config.json"))
    differ = {k: (src_cfg.get(k), out_cfg.get(k)) for k in sorted(set(src_cfg) | set(out_cfg))
              if src_cfg.get(k) != out_cfg.get(k)}
    # docs/checkpoints.md: the export's dtype is its own; GPT-2's position table has seq_len rows now.
    listed = {"dtype", "torch_dtype"} | ({"n_positions"} if family == "gpt2" else set())
    check(set(differ) <= listed, f"export: config.json differs from the source's in {differ} (source, export)")
    _, text = run([a.cleave, "generate", "tp2/checkpoints", "--tokenizer", "exported/tokenizer.json", "--prompt",
                   PROMPT, "--tokens", "8"])
    sample = next((line for line in text.splitlines() if PROMPT in line), "(no line with the prompt)")
    check(PROMPT in text, f"generate --tokens 8: {sample[:120]!r}")
    return d


def refused(a, cmd, must, what):
    if os.path.exists("refused_out"):
        shutil.rmtree("refused_out")
    rc, text = run(cmd, expect_ok=False)
    last = [line for line in text.strip().splitlines() if line.strip()][-1:] or ["(no output)"]
    ok = rc != 0 and all(m in text for m in must) and not os.path.exists("refused_out/checkpoints")
    check(ok, f"refuse {what}: {last[0][:160]}")


def mistakes(a, dirs, work):
    print("mistakes:", flush=True)
    os.chdir(dirs["llama"])
    base = [a.cleave, "train", "--init-from", "model", "--set", "data.type=tokens", "--set",
            "data.path=shards/train.bin", "--set", "train.steps=1", "--set", "train.out_dir=refused_out"]
    refused(a, base + ["--set", "model.d_model=32"], ["d_model", "32", "64"], "dims that disagree with the weights")
    refused(a, base + ["--set", f"model.seq_len={a.max_positions * 2}"], [str(a.max_positions * 2)],
            "seq_len above max_position_embeddings")
    if "qwen2" in dirs:
        other = os.path.join(dirs["qwen2"], "shards", "train.bin")
        refused(a, base + ["--set", f"data.path={other}"], ["tokenizer"], "shards of another model's tokenizer")
    # config.json keys that change the numbers
    cfg = json.load(open("model/config.json"))
    for name, change in (
            ("rope_scaling llama3", {"rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                                      "high_freq_factor": 4.0,
                                                      "original_max_position_embeddings": 64}}),
            ("rope_scaling yarn", {"rope_scaling": {"rope_type": "yarn", "factor": 4.0,
                                                    "original_max_position_embeddings": 64}}),
            ("rope_scaling linear (transformers 4 'type')", {"rope_scaling": {"type": "linear", "factor": 2.0}}),
            ("rope_parameters yarn (transformers 5)", {"rope_parameters": {"rope_type": "yarn", "factor": 4.0,
                                                                           "rope_theta": 10000.0}}),
            ("sliding_window on a Llama", {"sliding_window": 16})):
        bad = os.path.join(work, "bad_" + name.split()[0] + str(len(name)))
        shutil.copytree("model", bad)
        c = dict(cfg)
        c.pop("rope_parameters", None) if "rope_scaling" in change else None
        c.update(change)
        json.dump(c, open(os.path.join(bad, "config.json"), "w"))
        key = next(iter(change))
        refused(a, [a.cleave, "import", bad, "--out", "refused_out"], [key], name)
    # tokenizer.json parts Cleave does not read
    tj = json.load(open("model/tokenizer.json"))
    for name, change in (("a Unigram model", lambda j: j.update(model={"type": "Unigram", "unk_id": 0,
                                                                         "vocab": [["<unk>", 0.0], ["a", -1.0]]})),
                         ("a WordPiece model", lambda j: j["model"].update(type="WordPiece")),
                         ("a Precompiled normalizer", lambda j: j.update(
                             normalizer={"type": "Precompiled", "precompiled_charsmap": "AAAA"})),
                         ("a Digits pre-tokenizer", lambda j: j.update(
                             pre_tokenizer={"type": "Digits", "individual_digits": True})),
                         ("BPE dropout", lambda j: j["model"].update(dropout=0.1))):
        j = json.loads(json.dumps(tj))
        change(j)
        path = os.path.join(work, "tok_" + name.split()[1] + ".json")
        json.dump(j, open(path, "w"))
        open("one.txt", "w").write("hello world\n")
        rc, text = run([a.cleave, "tokenize", "one.txt", "--tokenizer", path, "--out", "refused_tok"],
                       expect_ok=False)
        last = [line for line in text.strip().splitlines() if line.strip()][-1:] or ["(no output)"]
        check(rc != 0 and not os.path.exists("refused_tok/train.bin"), f"refuse {name}: {last[0][:200]}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cleave", default=os.path.join(sp.ROOT, "build", "bin", "cleave"))
    ap.add_argument("--mpiexec", default="mpiexec")
    ap.add_argument("--only", default=",".join(FAMILIES))
    ap.add_argument("--seq-len", type=int, default=16)
    ap.add_argument("--max-positions", type=int, default=64)
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--tolerance", type=float, default=1e-4)
    ap.add_argument("--keep", action="store_true", help="keep the work directory")
    a = ap.parse_args()
    a.cleave = os.path.abspath(a.cleave)
    import tokenizers
    print(f"transformers {transformers.__version__}, tokenizers {tokenizers.__version__}, torch {torch.__version__}")
    work = tempfile.mkdtemp(prefix="finetune_families_")
    corpus = os.path.join(work, "corpus.txt")
    open(corpus, "w", encoding="utf-8").write(sp.repo_text())
    docs = sorted(glob.glob(os.path.join(sp.ROOT, "docs", "*.md")))[:4]
    dirs = {}
    for family in a.only.split(","):
        try:
            dirs[family] = journey(a, family, corpus, docs, work)
        except Exception as e:  # noqa: BLE001 -- one family's failure must not hide the others'
            check(False, f"{family}: {str(e)[-2500:]}")
    if "llama" in dirs:
        mistakes(a, dirs, work)
    print(f"work directory: {work}" if a.keep else "")
    if not a.keep:
        shutil.rmtree(work, ignore_errors=True)
    print("ALL OK" if not FAILURES else f"FAILED: {len(FAILURES)} checks")
    return 0 if not FAILURES else 1


if __name__ == "__main__":
    sys.exit(main())
