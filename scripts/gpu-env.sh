#!/usr/bin/env bash
# Finds the CUDA compiler, cuBLAS, cuDNN and NCCL on a GPU host and exports the hints Cleave's CMake reads, so
#
#   source scripts/gpu-env.sh && cmake -S . -B build && cmake --build build -j
#
# builds the CUDA backend on a bare GPU machine, whether the libraries come from the CUDA toolkit, from system
# packages (libcudnn9-dev-cuda-*, libnccl-dev) or from the Python wheels PyTorch installs
# (site-packages/nvidia/{cudnn,nccl}/{include,lib}; cuBLAS(Lt) and cudart in nvidia/cu13/{include,lib} for
# CUDA 13 wheels, nvidia/cublas/... for CUDA 12 ones). Run it without `source` to only print what it found.
#
#   source scripts/gpu-env.sh --runtime [--quiet]
#
# is the run-time half, for running binaries built elsewhere (scripts/gpu-check.sh): it needs no nvcc and no
# headers; for each CUDA library soname the binaries need (CLEAVE_CUDA_SONAMES, space-separated; default
# libcudart.so.13 libcublasLt.so.13 libcudnn.so.9 libnccl.so.2) and the driver's libcuda.so.1 it keeps what the
# loader already finds (LD_LIBRARY_PATH, ldconfig) and otherwise prepends the first directory that holds it:
# the toolkit (CUDA_HOME, /usr/local/cuda*), the driver's /usr/local/nvidia/lib64, then the wheels. It prints
# one line per soname: the file the loader will use, its real file and where it came from.
#
# Exports: CUDACXX (nvcc, read by CMake's CUDA language support), CUDAToolkit_ROOT, CLEAVE_CUDA_LIB_DIRS and
# CLEAVE_CUDA_INCLUDE_DIRS (';'-separated, read by cmake/CleaveDependencies.cmake), and LD_LIBRARY_PATH with
# the library directories that are not on the default search path (wheels), so the tests find them at run time.
# Search order per library: the toolkit next to nvcc, then system directories, then Python wheels; the first
# directory holding both the library and its header wins. A library whose major version differs from the
# toolkit's (e.g. a CUDA 12 wheel next to a CUDA 13 nvcc) is reported, because mixing them fails at load time.
#
# Overrides: CUDACXX or CUDA_HOME pick the toolkit; CLEAVE_PYTHON_SITE_DIRS (':'-separated) replaces the
# site-packages directories asked from python3.
#
# Invariant: the script only reads the file system and runs `nvcc --version`, `nvidia-smi` and python3 to list
# site-packages; it installs nothing. When sourced it never exits the caller's shell (it returns 1 instead).

# _cleave_gpu_runtime: the --runtime mode (see the header). Uses quiet, sites, _say and _warn of its caller.
_cleave_gpu_runtime() {
  local sonames=(${CLEAVE_CUDA_SONAMES:-libcudart.so.13 libcublasLt.so.13 libcudnn.so.9 libnccl.so.2} libcuda.so.1)
  local dirs=() d s
  [[ -n "${CUDA_HOME:-}" ]] && dirs+=("$CUDA_HOME/lib64" "$CUDA_HOME/lib" "$CUDA_HOME/targets/x86_64-linux/lib")
  for d in /usr/local/cuda $(ls -d /usr/local/cuda-* 2>/dev/null | sort -rV); do
    dirs+=("$d/lib64" "$d/lib" "$d/targets/x86_64-linux/lib")
  done
  dirs+=(/usr/local/nvidia/lib64 /usr/local/nvidia/lib)
  for s in "${sites[@]}"; do
    dirs+=("$s/nvidia/cu13/lib" "$s/nvidia/cudnn/lib" "$s/nvidia/nccl/lib" "$s/nvidia/cuda_runtime/lib"
           "$s/nvidia/cublas/lib" "$s/nvidia/cu12/lib")
  done
  local so found from missing=0 added=()
  for so in "${sonames[@]}"; do
    found="" from=""
    local IFS=':'
    for d in ${LD_LIBRARY_PATH:-}; do
      [[ -n "$d" && -e "$d/$so" ]] && { found="$d/$so"; from="LD_LIBRARY_PATH"; break; }
    done
    unset IFS
    if [[ -z "$found" ]] && command -v ldconfig >/dev/null 2>&1; then
      found="$(ldconfig -p 2>/dev/null | awk -v so="$so" '!found && $1 == so && /x86-64/ { print $NF; found = 1 }')"
      [[ -n "$found" ]] && from="ldconfig"
    fi
    if [[ -z "$found" ]]; then
      for d in "${dirs[@]}"; do
        if [[ -e "$d/$so" ]]; then
          found="$d/$so"; from="added to LD_LIBRARY_PATH"
          export LD_LIBRARY_PATH="$d${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
          added+=("$d")
          break
        fi
      done
    fi
    if [[ -z "$found" ]]; then
      _warn "$so not found (LD_LIBRARY_PATH, ldconfig, the CUDA toolkit, /usr/local/nvidia, site-packages/nvidia)"
      missing=$((missing + 1))
      continue
    fi
    _say "$(printf '%-18s: %s -> %s (%s)' "$so" "$found" "$(readlink -f "$found")" "$from")"
  done
  for s in "${sites[@]}"; do
    ls -d "$s"/nvidia_*.dist-info >/dev/null 2>&1 || continue
    _say "wheels in $s: $(cd "$s" && ls -d nvidia_*.dist-info | sed 's/\.dist-info$//' | tr '\n' ' ')"
  done
  [[ $missing -eq 0 ]]
}

_cleave_gpu_env() {
  local quiet=0 runtime=0 arg
  for arg in "$@"; do
    case "$arg" in
      --quiet) quiet=1 ;;
      --runtime) runtime=1 ;;
      *) printf 'gpu-env: unknown argument %s (expected --quiet, --runtime)\n' "$arg" >&2; return 1 ;;
    esac
  done
  _say() { [[ $quiet -eq 1 ]] || printf '%s\n' "$*"; }
  _warn() { printf 'gpu-env: %s\n' "$*" >&2; }

  # ---- nvcc and the toolkit ---------------------------------------------------------------------------------
  local nvcc=""
  local candidates=()
  [[ -n "${CUDACXX:-}" ]] && candidates+=("$CUDACXX")
  [[ -n "${CUDA_HOME:-}" ]] && candidates+=("$CUDA_HOME/bin/nvcc")
  command -v nvcc >/dev/null 2>&1 && candidates+=("$(command -v nvcc)")
  candidates+=(/usr/local/cuda/bin/nvcc)
  local d
  for d in $(ls -d /usr/local/cuda-* 2>/dev/null | sort -rV); do candidates+=("$d/bin/nvcc"); done

  # site-packages directories (wheels): asked from python3 unless overridden
  local sites=()
  if [[ -n "${CLEAVE_PYTHON_SITE_DIRS:-}" ]]; then
    IFS=':' read -r -a sites <<<"$CLEAVE_PYTHON_SITE_DIRS"
  else
    local py
    for py in python3 python; do
      command -v "$py" >/dev/null 2>&1 || continue
      while IFS= read -r d; do [[ -d "$d" ]] && sites+=("$d"); done < <("$py" - <<'PY' 2>/dev/null
import site, sys
dirs = list(getattr(site, "getsitepackages", lambda: [])()) + [site.getusersitepackages()]
print("\n".join(dict.fromkeys(d for d in dirs + sys.path if d.endswith("-packages"))))
PY
)
      break
    done
  fi
  local s
  for s in "${sites[@]}"; do candidates+=("$s/nvidia/cuda_nvcc/bin/nvcc"); done
  if [[ $runtime -eq 1 ]]; then
    _cleave_gpu_runtime
    return $?
  fi

  local c
  for c in "${candidates[@]}"; do
    if [[ -x "$c" ]]; then nvcc="$c"; break; fi
  done
  if [[ -z "$nvcc" ]]; then
    _warn "no nvcc found (looked at \$CUDACXX, \$CUDA_HOME, PATH, /usr/local/cuda*, site-packages/nvidia/cuda_nvcc)."
    _warn "Install a CUDA toolkit (e.g. apt-get install cuda-toolkit-12-8, or pip install nvidia-cuda-nvcc-cu12);"
    _warn "without one Cleave builds its CPU backend only."
    return 1
  fi
  local toolkit
  toolkit="$(cd "$(dirname "$nvcc")/.." && pwd)"
  local cuda_version
  cuda_version="$("$nvcc" --version 2>/dev/null | sed -n 's/.*release \([0-9][0-9]*\.[0-9][0-9]*\).*/\1/p' | sed -n 1p)"
  local cuda_major="${cuda_version%%.*}"
  _say "nvcc     : $nvcc (CUDA ${cuda_version:-unknown})"

  # ---- libraries ----------------------------------------------------------------------------------------------
  local toolkit_libs=("$toolkit/lib64" "$toolkit/lib" "$toolkit/targets/x86_64-linux/lib" "$toolkit/targets/sbsa-linux/lib")
  local toolkit_incs=("$toolkit/include" "$toolkit/targets/x86_64-linux/include" "$toolkit/targets/sbsa-linux/include")
  local system_libs=(/usr/lib/x86_64-linux-gnu /usr/lib/aarch64-linux-gnu /usr/lib64 /usr/lib)
  local system_incs=(/usr/include /usr/include/x86_64-linux-gnu /usr/include/aarch64-linux-gnu)
  local lib_dirs=() inc_dirs=() run_dirs=() problems=0

  # _find <name> <library stem> <header> <wheel package>: sets found_lib / found_inc / found_file
  _find() {
    local stem="$2" header="$3" wheel="$4"
    local pairs=() l i
    for l in "${toolkit_libs[@]}"; do for i in "${toolkit_incs[@]}"; do pairs+=("$l|$i|toolkit"); done; done
    for l in "${system_libs[@]}"; do for i in "${system_incs[@]}"; do pairs+=("$l|$i|system"); done; done
    local w
    for s in "${sites[@]}"; do
      for w in $wheel; do pairs+=("$s/nvidia/$w/lib|$s/nvidia/$w/include|wheel"); done
    done
    found_lib="" found_inc="" found_file="" found_from=""
    local p f
    for p in "${pairs[@]}"; do
      l="${p%%|*}"; i="${p#*|}"; i="${i%%|*}"
      [[ -f "$i/$header" ]] || continue
      f="$(ls "$l/lib$stem.so" "$l"/lib"$stem".so.[0-9]* 2>/dev/null | sed -n 1p)"
      [[ -n "$f" ]] || continue
      found_lib="$l"; found_inc="$i"; found_file="$f"; found_from="${p##*|}"
      return 0
    done
    return 1
  }

  # _major <file>: the major version in a versioned file name (libcublas.so.12 -> 12), or the link target's
  _major() {
    local real
    real="$(readlink -f "$1")"
    local v="${real##*.so.}"
    [[ "$v" != "$real" ]] && printf '%s' "${v%%.*}"
  }

  local entry name stem header wheel major
  # The wheel field lists site-packages/nvidia subfolders, newest layout first: CUDA 13 wheels put cuBLAS(Lt)
  # and cudart together in nvidia/cu13, CUDA 12 wheels had nvidia/cublas.
  for entry in "cuBLASLt|cublasLt|cublasLt.h|cu13 cublas" "cuDNN|cudnn|cudnn.h|cudnn" "NCCL|nccl|nccl.h|nccl"; do
    IFS='|' read -r name stem header wheel <<<"$entry"
    if ! _find "$name" "$stem" "$header" "$wheel"; then
      _warn "$name not found (lib$stem.so* next to $header) in the toolkit ($toolkit), system directories or"
      _warn "  site-packages/nvidia/{${wheel// /,}}; install it (apt: libcudnn9-dev-cuda-$cuda_major / libnccl-dev;"
      _warn "  pip: nvidia-cudnn-cu$cuda_major / nvidia-nccl-cu$cuda_major) or set CLEAVE_PYTHON_SITE_DIRS"
      problems=$((problems + 1))
      continue
    fi
    _say "$(printf '%-9s: %s (%s; headers %s)' "$name" "$found_file" "$found_from" "$found_inc")"
    if [[ "$name" == "cuBLASLt" && "$found_from" != "toolkit" ]]; then
      _warn "cuBLASLt comes from $found_from, not from the toolkit next to nvcc; CMake links the toolkit's"
      _warn "  (CUDA::cublasLt), so install the toolkit's cuBLAS (e.g. apt-get install libcublas-dev-$cuda_major-*)"
      problems=$((problems + 1))
    fi
    major="$(_major "$found_file")"
    if [[ "$name" == "cuBLASLt" && -n "$major" && -n "$cuda_major" && "$major" != "$cuda_major" ]]; then
      _warn "$name major version $major != CUDA $cuda_major of $nvcc"
      problems=$((problems + 1))
    fi
    [[ " ${lib_dirs[*]} " == *" $found_lib "* ]] || lib_dirs+=("$found_lib")
    [[ " ${inc_dirs[*]} " == *" $found_inc "* ]] || inc_dirs+=("$found_inc")
    [[ "$found_from" == "wheel" ]] && run_dirs+=("$found_lib")
  done
  if [[ ${#run_dirs[@]} -gt 0 ]]; then
    # A wheel built for another CUDA major (nvidia-cudnn-cu12 next to CUDA 13) is found but may fail at run time;
    # the wheel directory does not record its CUDA major, so this is said rather than checked.
    _say "note     : libraries from Python wheels are used; wheels are built per CUDA major version (the pip"
    _say "           package name ends in -cu12 / -cu13) and must match CUDA ${cuda_version:-?} of nvcc"
  fi

  # ---- GPU architecture (informational: the build targets sm_80 and sm_90 unless told otherwise) ----------------
  local arch=""
  if command -v nvidia-smi >/dev/null 2>&1; then
    arch="$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | sed -n 1p | tr -d ' .')"
  fi
  if [[ -n "$arch" ]]; then
    _say "GPU      : sm_$arch (add -DCMAKE_CUDA_ARCHITECTURES=$arch to compile for this GPU only)"
  else
    _say "GPU      : none visible to nvidia-smi (the build still compiles; the gpu tests will skip)"
  fi

  # ---- exports ------------------------------------------------------------------------------------------------
  local IFS=';'
  export CUDACXX="$nvcc"
  export CUDAToolkit_ROOT="$toolkit"
  export CLEAVE_CUDA_LIB_DIRS="${lib_dirs[*]}"
  export CLEAVE_CUDA_INCLUDE_DIRS="${inc_dirs[*]}"
  IFS=':'
  if [[ ${#run_dirs[@]} -gt 0 ]]; then
    export LD_LIBRARY_PATH="${run_dirs[*]}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  fi
  unset IFS
  _say "exported : CUDACXX CUDAToolkit_ROOT CLEAVE_CUDA_LIB_DIRS='$CLEAVE_CUDA_LIB_DIRS'"
  _say "           CLEAVE_CUDA_INCLUDE_DIRS='$CLEAVE_CUDA_INCLUDE_DIRS'${run_dirs:+ LD_LIBRARY_PATH}"
  _say "next     : cmake -S . -B build && cmake --build build -j && (cd build && ctest -L gpu --output-on-failure)"
  [[ $problems -eq 0 ]]
}

if [[ "${BASH_SOURCE[0]}" == "$0" ]]; then
  set -uo pipefail
  _cleave_gpu_env "$@"
  status=$?
  echo "(run with 'source' to export these into your shell)"
  exit $status
else
  _cleave_gpu_env "$@"
  _cleave_gpu_env_status=$?
  unset -f _cleave_gpu_env _cleave_gpu_runtime _say _warn _find _major
  return $_cleave_gpu_env_status 2>/dev/null || true
fi
