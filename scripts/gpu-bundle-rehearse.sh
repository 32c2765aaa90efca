#!/usr/bin/env bash
# Rehearses scripts/gpu-check.sh on this (build) machine with every library the bundle carries hidden, so a
# library or Open MPI file the bundle misses fails here rather than on the GPU host (docs/cuda.md, "Rehearsing
# without a GPU"):
#
#   sudo scripts/gpu-bundle-rehearse.sh OUTDIR [gpu-check.sh options]
#
# Assumes: root (mount namespaces), util-linux `unshare`, and build-gpu/cleave-gpu-bundle.tar.gz from
# scripts/gpu-bundle.sh. In a private mount namespace (`unshare -m`; nothing outside it changes) it binds
# /dev/null over the system's copy of each library in the bundle's lib/ (the resolved file, `readlink -f`)
# and over Open MPI's programs, binds an empty directory over Open MPI's and PMIx's library, data and
# configuration directories, then runs gpu-check.sh against the unpacked bundle. A system library the
# binaries still reached would fail to load ("file too short"), and ldd would name it.
set -euo pipefail

if [[ "${1:-}" != "--inside" ]]; then
  [[ $# -ge 1 ]] || { sed -n '2,8p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
  [[ "$(id -u)" -eq 0 ]] || { echo "gpu-bundle-rehearse: needs root (unshare -m, mount --bind)" >&2; exit 2; }
  exec unshare -m --propagation private bash "$0" --inside "$@"
fi
shift
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
outdir="$1"; shift
work="$(mktemp -d "${TMPDIR:-/tmp}/cleave-rehearse.XXXXXX")"
trap 'rm -rf "$work"' EXIT
tar -C "$work" -xzf "$repo/build-gpu/cleave-gpu-bundle.tar.gz"
bundle="$work/cleave-gpu-bundle"
empty="$work/empty"
mkdir -p "$empty"

hidden=0
for lib in "$bundle"/lib/*; do
  so="$(basename "$lib")"
  for dir in /lib/x86_64-linux-gnu /usr/lib/x86_64-linux-gnu /usr/lib/x86_64-linux-gnu/openmpi/lib \
             /usr/lib/x86_64-linux-gnu/pmix2/lib /usr/lib/x86_64-linux-gnu/openblas-pthread /usr/local/lib; do
    [[ -e "$dir/$so" ]] || continue
    real="$(readlink -f "$dir/$so")"
    if ! grep -qxF "$real" "$work/hidden.txt" 2>/dev/null; then
      mount --bind /dev/null "$real"
      echo "$real" >>"$work/hidden.txt"
      hidden=$((hidden + 1))
    fi
  done
done
for f in /usr/bin/orterun /usr/bin/orted /usr/bin/ompi_info; do
  [[ -e "$f" ]] && mount --bind /dev/null "$(readlink -f "$f")" && echo "$f" >>"$work/hidden.txt"
done
for d in /usr/lib/x86_64-linux-gnu/openmpi /usr/lib/x86_64-linux-gnu/pmix2 /usr/share/openmpi /etc/openmpi; do
  [[ -d "$d" ]] && mount --bind "$empty" "$d" && echo "$d/ (empty)" >>"$work/hidden.txt"
done
echo "gpu-bundle-rehearse: hid $hidden library files and Open MPI's programs and directories:"
sed 's/^/  /' "$work/hidden.txt"
# Proof that the hiding works: a system binary that needs them no longer starts.
if ldd /usr/bin/orterun >/dev/null 2>&1 && /usr/bin/mpirun --version >/dev/null 2>&1; then
  echo "gpu-bundle-rehearse: the system's mpirun still runs: the hiding did not take" >&2; exit 1
fi
echo "gpu-bundle-rehearse: the system's mpirun no longer starts; running gpu-check.sh on the bundle"
rc=0
bash "$repo/scripts/gpu-check.sh" --bundle "$bundle" "$@" "$outdir" || rc=$?
exit "$rc"
