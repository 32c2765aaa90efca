#!/usr/bin/env python3
"""Writes the seed corpora of tests/fuzz/ (corpus/<target>/) and the checkpoint files the index target reads
(data/checkpoint/). Deterministic: rerunning it rewrites the same bytes. Seeds are small valid inputs (so
mutations start inside each format) plus a few near-misses; the crash inputs the fuzzers found live next to
them as regress-*. Usage: python3 tests/fuzz/make_seeds.py (from anywhere)."""
import json
import os
import shutil
import struct

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def put(target, name, data):
    d = os.path.join(HERE, "corpus", target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode())


# ---- config: JSON text, then "\n--set\n" and one override per line ----------------------------------------
def config_seeds():
    for name in sorted(os.listdir(os.path.join(ROOT, "examples"))):
        if name.endswith(".json"):
            with open(os.path.join(ROOT, "examples", name), "rb") as f:
                put("config", "example-" + name[:-5], f.read())
    put("config", "empty-object", "{}")
    put("config", "sets", '{"train": {"steps": 5}}\n--set\noptimizer.lr=3e-4\nparallel.pipeline_model_parallel_size=2\n'
        'batch.global_batch_size=16\ndevice.memory_limit="512MiB"\n')
    put("config", "mlp", '{"model": {"type": "mlp", "in_features": 64, "hidden": [32, 16], "num_classes": 10}, '
        '"data": {"type": "digits"}, "parallel": {"tensor_model_parallel_size": 2}}')
    put("config", "cnn", '{"model": {"type": "cnn", "channels": [4, 8], "kernel": 3, "pool": 2}, "data": {"type": "digits"}}')
    put("config", "layout", '{"parallel": {"tensor_model_parallel_size": 2, "pipeline_model_parallel_size": 2, '
        '"virtual_pipeline_stages": 2, "schedule": "interleaved_1f1b", "partition": {"method": "manual", '
        '"blocks_per_stage": [1, 1, 1, 1]}}, "model": {"n_layers": 4}, "batch": {"micro_batch_size": 2, '
        '"gradient_accumulation_steps": 4}}')
    put("config", "data-tokens", '{"data": {"type": "tokens", "path": "x.bin", "format": "uint16", "val_fraction": 0.2}, '
        '"train": {"eval_interval": 5, "seed": 18446744073709551615}}')
    put("config", "huge-number", '{}\n--set\noptimizer.lr=1e309\n')


# ---- schedule text ------------------------------------------------------------------------------------------
def schedule_seeds():
    put("schedule_text", "1f1b-pp2", "# 1f1b\nname: 1f1b\npp_size: 2\nnum_stages: 2\nnum_microbatches: 2\n"
        "virtual_stages: 1\nplacement: 0 1\nrank 0: 0F0 0F1 0B0 0B1\nrank 1: 1F0 1B0 1F1 1B1\n")
    put("schedule_text", "minimal", "rank 0: 0F0 0B0\n")
    put("schedule_text", "zb-split", "rank 0: 0F0 0F1 0I0 0I1 0W0 0W1\nrank 1: 1F0 1I0 1F1 1I1 1W0 1W1\n")
    put("schedule_text", "interleaved", "pp_size: 2\nvirtual_stages: 2\nplacement: 0 1 0 1\n"
        "rank 0: 0F0 2F0 2B0 0B0\nrank 1: 1F0 3F0 3B0 1B0\n")
    put("schedule_text", "lowered", "rank 0: 0F0 0SEND_F0 0RECV_B0 0B0 0REDUCE_GRAD OPTIMIZER_STEP\n"
        "rank 1: 1RECV_F0 1F0 1B0 1SEND_B0 1REDUCE_GRAD OPTIMIZER_STEP\n")
    put("schedule_text", "bad-token", "rank 0: 0F0 0Z0\n")


# ---- token files ----------------------------------------------------------------------------------------------
def llmc(tokens, magic=20240520, version=1, count=None):
    header = [magic, version, len(tokens) if count is None else count] + [0] * 253
    return struct.pack("<256i", *header) + struct.pack("<%dH" % len(tokens), *tokens)


def token_seeds():
    put("token_file", "llmc-5", llmc([1, 2, 3, 50256, 7]))
    put("token_file", "llmc-truncated", llmc([1, 2, 3], count=4))
    put("token_file", "llmc-bad-version", llmc([1], version=2))
    put("token_file", "uint16", struct.pack("<6H", 0, 1, 2, 65535, 4, 5))
    put("token_file", "text", "Hello, fuzz.\n")


# ---- safetensors ----------------------------------------------------------------------------------------------
def safetensors(tensors, metadata=None):
    """tensors: [(name, dtype, shape, bytes)] in order."""
    header = {}
    if metadata:
        header["__metadata__"] = metadata
    offset = 0
    for name, dtype, shape, data in tensors:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
    text = json.dumps(header, separators=(",", ":"))
    text += " " * ((8 - len(text) % 8) % 8)
    return struct.pack("<Q", len(text)) + text.encode() + b"".join(t[3] for t in tensors)


def f32(values):
    return struct.pack("<%df" % len(values), *values)


def safetensors_seeds():
    put("safetensors", "three", safetensors([("w.a", "F32", [2, 3], f32([0.5 * i for i in range(6)])),
                                             ("b", "I64", [2], struct.pack("<2q", -1, 1 << 40)),
                                             ("c", "BF16", [3], struct.pack("<3H", 0x3f80, 0, 0xbf80))],
                                            {"step": "12"}))
    put("safetensors", "scalar-and-empty", safetensors([("s", "F32", [], f32([1.0])), ("e", "F32", [0, 4], b"")]))
    put("safetensors", "header-only", safetensors([]))


# ---- checkpoint index + the files it names -----------------------------------------------------------------
def fnv1a64(data):
    h = 0xcbf29ce484222325
    for b in data:
        h = ((h ^ b) * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
    return h


def index_seeds():
    data = os.path.join(HERE, "data", "checkpoint")
    shutil.rmtree(data, ignore_errors=True)
    os.makedirs(data)
    # Logical tensors: w [4, 3] split over tp 2 along dim 0 (rank 0 and rank 1 each hold [2, 3]); b [3]
    # replicated; w.exp_avg stored as two ZeRO-1 segments of shard 0 and one of shard 1; qkv [6, 2] split along
    # dim 0 in 3 groups over tp 2.
    w = [float(i) for i in range(12)]
    qkv = [0.25 * i for i in range(12)]
    rank0 = [("w", "F32", [6], f32(w[0:6])), ("b", "F32", [3], f32([1.0, 2.0, 3.0])),
             ("w.exp_avg@0", "F32", [4], f32([0.1] * 4)), ("w.exp_avg@4", "F32", [2], f32([0.2] * 2)),
             ("qkv", "F32", [6], f32(qkv[0:2] + qkv[4:6] + qkv[8:10]))]
    rank1 = [("w", "F32", [6], f32(w[6:12])), ("w.exp_avg", "F32", [6], f32([0.3] * 6)),
             ("qkv", "F32", [6], f32(qkv[2:4] + qkv[6:8] + qkv[10:12]))]
    files = {}
    for name, tensors in (("rank_00000.safetensors", rank0), ("rank_00001.safetensors", rank1)):
        blob = safetensors(tensors, {"format": "cleave-checkpoint"})
        with open(os.path.join(data, name), "wb") as f:
            f.write(blob)
        files[name] = {"bytes": len(blob), "checksum": "fnv1a64:%016x" % fnv1a64(blob)}

    def piece(file, name, dim, parts, index, groups, begin, end):
        return {"file": file, "name": name, "dim": dim, "parts": parts, "index": index, "groups": groups,
                "begin": begin, "end": end}
    r0, r1 = "rank_00000.safetensors", "rank_00001.safetensors"
    index = {
        "format": "cleave-checkpoint", "version": 1, "step": 3, "consumed_samples": 24, "next_lr": 0.001,
        "seed": 1234, "model": {"type": "gpt", "vocab_size": 16, "d_model": 8, "n_layers": 1, "n_heads": 2,
                                "seq_len": 4, "d_ff": 32, "tie_embeddings": True},
        "layout": {"tp": 2, "pp": 1, "dp": 1, "virtual_pipeline_stages": 1, "zero_stage": 1, "world_size": 2,
                   "schedule": "1f1b"},
        "optimizer": {"type": "adamw", "steps_done": 3},
        "files": files,
        "tensors": {
            "w": {"kind": "parameter", "shape": [4, 3], "dtype": "F32",
                  "pieces": [piece(r0, "w", 0, 2, 0, 1, 0, 6), piece(r1, "w", 0, 2, 1, 1, 0, 6)]},
            "b": {"kind": "parameter", "shape": [3], "dtype": "F32", "pieces": [piece(r0, "b", -1, 1, 0, 1, 0, 3)]},
            "w.exp_avg": {"kind": "optimizer_state", "shape": [4, 3], "dtype": "F32",
                          "pieces": [piece(r0, "w.exp_avg@0", 0, 2, 0, 1, 0, 4), piece(r0, "w.exp_avg@4", 0, 2, 0, 1, 4, 6),
                                     piece(r1, "w.exp_avg", 0, 2, 1, 1, 0, 6)]},
            "qkv": {"kind": "parameter", "shape": [6, 2], "dtype": "F32",
                    "pieces": [piece(r0, "qkv", 0, 2, 0, 3, 0, 6), piece(r1, "qkv", 0, 2, 1, 3, 0, 6)]},
        },
    }
    put("checkpoint_index", "index", json.dumps(index, indent=1) + "\n")
    small = dict(index, tensors={"b": index["tensors"]["b"]})
    put("checkpoint_index", "index-one-tensor", json.dumps(small, separators=(",", ":")))
    gap = json.loads(json.dumps(index))
    gap["tensors"]["w.exp_avg"]["pieces"][1]["begin"] = 5
    put("checkpoint_index", "index-gap", json.dumps(gap, separators=(",", ":")))


# ---- tokenizer: a mode byte (0-3: encode with the tiny tokenizer, 4: read as tokenizer.json), then the text ----
def tokenizer_seeds():
    put("tokenizer", "gpt2-words", b"\x00hello the abc it's aaaa<|endoftext|>")
    put("tokenizer", "llama3-awkward", b"\x01I'M 12345 don'T\r\n\r\n  x" + "\u00a0y \u3000z \U0001f600".encode())
    put("tokenizer", "prefix-space", b"\x02 a<|endoftext|>b\n\n  ")
    put("tokenizer", "ignore-merges", b"\x03abc 12345 " + "\u017f'\u017fx".encode())
    put("tokenizer", "invalid-utf8", b"\x00ok \xff\xc3(")
    small = {"model": {"type": "BPE", "vocab": {"a": 0}, "merges": ["a a"]}, "normalizer": None,
             "pre_tokenizer": {"type": "ByteLevel"}, "decoder": {"type": "ByteLevel"}}
    put("tokenizer", "json-small", b"\x04" + json.dumps(small).encode())


if __name__ == "__main__":
    config_seeds()
    schedule_seeds()
    token_seeds()
    safetensors_seeds()
    index_seeds()
    tokenizer_seeds()
