"""Helpers the peer comparison scripts of benchmarks/peers/ share (standard library only, so any of them can
import it before torch or tokenizers): the repository root and its text (the tokenizers' training corpus),
Cleave's token shard reader, the machine-wide lock the CPU benchmarks take while they time, and the median step
time of a Python contender (median_seconds).

Invariant: read_shard accepts exactly the two shard formats `cleave tokenize` writes (docs/tokenizer.md): a
1024-byte header of 256 little-endian int32 (magic, version, token count) then u16 ids (20240520, version 1) or
u32 ids (20240801, version 7); anything else, or a count that is not the data's length, is an AssertionError.
"""
import contextlib
import fcntl
import glob
import os
import statistics
import struct
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def repo_text():
    """README.md, docs/*.md and engine/**/*.[ch]pp concatenated, in a fixed order."""
    paths = [os.path.join(ROOT, "README.md")] + sorted(glob.glob(os.path.join(ROOT, "docs", "*.md")))
    paths += sorted(glob.glob(os.path.join(ROOT, "engine", "**", "*.[ch]pp"), recursive=True))
    return "".join(open(p, encoding="utf-8").read() for p in paths)


def read_shard(path):
    """The token ids of a shard `cleave tokenize` wrote (train.bin, val.bin), as a list of ints."""
    with open(path, "rb") as f:
        header = struct.unpack("<256i", f.read(1024))
        data = f.read()
    assert header[:2] in ((20240520, 1), (20240801, 7)), header[:3]
    fmt = "H" if header[:2] == (20240520, 1) else "I"
    assert len(data) == struct.calcsize(fmt) * header[2], (len(data), header[2])
    return list(struct.unpack("<%d%s" % (header[2], fmt), data))


@contextlib.contextmanager
def held(lock_path):
    """Holds an exclusive flock on lock_path (created if absent) for the block; no lock when lock_path is ""."""
    if not lock_path:
        yield
        return
    with open(lock_path, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def median_seconds(step, warmup, steps):
    """The median wall time in seconds of `steps` calls of step() after `warmup` untimed ones (0.0 for no steps)."""
    for _ in range(warmup):
        step()
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        step()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) if times else 0.0
