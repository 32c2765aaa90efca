#!/usr/bin/env bash
# Installs Cleave's build and test dependencies from Debian packages (run as root or with sudo).
# Also fetches the handwritten-digits data set from Debian's python3-sklearn package into data/ (the
# package is downloaded and unpacked locally, not installed; nothing comes from outside Debian's archive).
# clang + libclang-rt-14-dev (libFuzzer and the sanitizer runtimes) build the fuzz targets (scripts/fuzz.sh).
#   --with-slurm   also SLURM (slurmctld, slurmd, srun with the PMIx plugin) and munge, for the `slurm` test
#                  label (tests/e2e/slurm_launch.sh starts a private single-node SLURM; CI uses this flag)
set -euo pipefail
cd "$(dirname "$0")/.."
with_slurm=0
for arg in "$@"; do
  case "$arg" in
    --with-slurm) with_slurm=1 ;;
    *) echo "install-deps.sh: unknown option '$arg' (known: --with-slurm)" >&2; exit 2 ;;
  esac
done

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi

packages=(
  build-essential cmake pkg-config
  libfmt-dev nlohmann-json3-dev libopenblas-dev
  libblis-dev libdnnl-dev
  libopenmpi-dev openmpi-bin
  libgtest-dev libgmock-dev libbenchmark-dev
  clang libclang-rt-14-dev
  fortunes
)
if [ "$with_slurm" = 1 ]; then packages+=(slurmctld slurmd slurm-client slurm-wlm-basic-plugins munge); fi
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -c "install ok installed" >/dev/null || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# Handwritten digits (8x8, 1797 samples) as shipped by Debian's python3-sklearn.
if [ ! -f data/digits.csv.gz ]; then
  mkdir -p data
  tmp=$(mktemp -d)
  (cd "$tmp" && apt-get download python3-sklearn >/dev/null && dpkg-deb -x python3-sklearn_*.deb unpacked)
  cp "$(find "$tmp/unpacked" -name digits.csv.gz | sed -n 1p)" data/digits.csv.gz
  rm -rf "$tmp"
fi
echo "dependencies ready"
