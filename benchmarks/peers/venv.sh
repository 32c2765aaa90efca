#!/usr/bin/env bash
# The PyTorch side of the peer benchmarks (benchmarks/peers/*.py): a venv with torch, transformers and
# safetensors from PyPI, without the ~3 GB of CUDA wheels torch asks for (these benchmarks run on the CPU).
# PyPI's Linux torch is the CUDA build: its CUDA libraries must still load at import, so the few the CUDA
# toolkit at /usr/local/cuda lacks (cuFile, cuSPARSELt, NVSHMEM, a NCCL as new as torch's) come as wheels,
# and `venv.sh env` prints the LD_LIBRARY_PATH that finds them.
#
#   benchmarks/peers/venv.sh [VENV_DIR]          # create (default /work/venv-peers)
#   eval "$(benchmarks/peers/venv.sh env [VENV_DIR])"; $VENV/bin/python benchmarks/peers/cpu_train_bench.py ...
set -euo pipefail
if [[ ${1:-} == env ]]; then
  venv=${2:-/work/venv-peers}
  sp=$(echo "$venv"/lib/python3*/site-packages)
  echo "export VENV=$venv LD_LIBRARY_PATH=$sp/nvidia/cusparselt/lib:$sp/nvidia/cu13/lib:$sp/nvidia/nvshmem/lib:$sp/nvidia/nccl/lib:/usr/local/cuda/lib64"
  exit 0
fi
venv=${1:-/work/venv-peers}
python3 -m venv "$venv"
"$venv/bin/pip" install --no-deps torch==2.15.0
"$venv/bin/pip" install filelock typing-extensions sympy networkx jinja2 fsspec numpy safetensors transformers
torch_cuda=$("$venv/bin/python" - <<'PY'
import importlib.metadata as m
reqs = m.requires("torch") or []
print(" ".join(r.split(";")[0].replace(" ", "") for r in reqs if r.startswith(("nvidia-cusparselt", "nvidia-nvshmem", "nvidia-nccl"))))
PY
)
# shellcheck disable=SC2086
"$venv/bin/pip" install --no-deps $torch_cuda nvidia-cufile
