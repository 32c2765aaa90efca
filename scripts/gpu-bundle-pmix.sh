#!/usr/bin/env bash
# The external PMIx that Open MPI's components use, for scripts/gpu-bundle.sh: prints the PMIx prefix (two levels
# above the libpmix.so that PKGLIBDIR's mca_pmix_ext*.so links), or nothing when PKGLIBDIR has no such component.
#
#   scripts/gpu-bundle-pmix.sh PKGLIBDIR     # Open MPI's pkglibdir (ompi_info --path pkglibdir)
#
# Invariant: never ends without a word. No mca_pmix_ext*.so is not an error (an Open MPI built with its own PMIx
# has none: nothing to bundle; a note on stderr, exit 0); a component that ldd cannot read, or that links no
# libpmix, is (exit 1, naming the file and what to do). Under `set -e` and `pipefail` an unmatched glob handed to ldd
# used to end gpu-bundle.sh silently.
set -euo pipefail
dir="${1:?usage: gpu-bundle-pmix.sh PKGLIBDIR}"
[[ -d "$dir" ]] || { echo "gpu-bundle-pmix: error: $dir is not a folder (Open MPI's pkglibdir)" >&2; exit 1; }
shopt -s nullglob
components=("$dir"/mca_pmix_ext*.so)
shopt -u nullglob
if [[ ${#components[@]} -eq 0 ]]; then
  echo "gpu-bundle-pmix: note: no mca_pmix_ext*.so in $dir: this Open MPI uses no external PMIx; none is bundled" >&2
  exit 0
fi
out="$(ldd "${components[@]}" 2>&1)" || {
  echo "gpu-bundle-pmix: error: ldd cannot read ${components[*]}: $(printf '%s\n' "$out" | sed -n 1,3p | paste -sd ' ' -)" >&2
  exit 1
}
lib="$(awk '!found && $1 ~ /^libpmix/ && $2 == "=>" && $3 ~ /^\// { print $3; found = 1 }' <<<"$out")"
if [[ -z "$lib" ]]; then
  echo "gpu-bundle-pmix: error: ${components[*]} links no libpmix that ldd resolves (install libpmix2, or check" \
       "LD_LIBRARY_PATH): mpirun could not start ranks from the bundle" >&2
  exit 1
fi
dirname "$(dirname "$(readlink -f "$lib")")"
