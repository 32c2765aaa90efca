#!/usr/bin/env bash
# Self-test of scripts/gpu-bundle-pmix.sh (the external PMIx gpu-bundle.sh bundles), without Open MPI's real folders:
#   - a pkglibdir without mca_pmix_ext*.so: exit 0, nothing printed, a note naming the folder (it used to end
#     gpu-bundle.sh under set -e and pipefail without a word)
#   - a component ldd cannot read, and one that links no libpmix: exit 1 with an error naming the file
#   - this machine's Debian Open MPI, when present: the PMIx prefix, a folder
# Usage: gpu_bundle_pmix.sh REPO_ROOT   (exit 0 when every check passes)
set -uo pipefail
root="$(cd "${1:?usage: gpu_bundle_pmix.sh REPO_ROOT}" && pwd)"
tool="$root/scripts/gpu-bundle-pmix.sh"
tmp="$(mktemp -d "${TMPDIR:-/tmp}/gpu-bundle-pmix.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
fails=0
# check WHAT WANT_RC STDOUT_REGEX STDERR_REGEX DIR
check() {
  local rc=0 out err
  out="$(bash "$tool" "$5" 2>"$tmp/err")" || rc=$?
  err="$(cat "$tmp/err")"
  if [[ $rc -eq $2 && "$out" =~ $3 && "$err" =~ $4 ]]; then echo "ok   $1"
  else echo "FAIL $1: exit $rc (want $2), stdout '$out', stderr '$err'"; fails=$((fails + 1)); fi
}
mkdir -p "$tmp/none" "$tmp/text" "$tmp/nolib"
check "no external PMIx component: a note, nothing to bundle" 0 '^$' "note: no mca_pmix_ext\\*\\.so in $tmp/none" "$tmp/none"
echo 'not a library' >"$tmp/text/mca_pmix_ext3x.so"
check "a component ldd cannot read: an error naming it" 1 '^$' "error: ldd cannot read $tmp/text/mca_pmix_ext3x\\.so" \
  "$tmp/text"
cp "$(command -v bash)" "$tmp/nolib/mca_pmix_ext3x.so"
check "a component without libpmix: an error naming it" 1 '^$' "error: $tmp/nolib/mca_pmix_ext3x\\.so links no libpmix" \
  "$tmp/nolib"
debian=/usr/lib/x86_64-linux-gnu/openmpi/lib/openmpi3
if compgen -G "$debian/mca_pmix_ext*.so" >/dev/null; then
  check "Debian's Open MPI: the PMIx prefix" 0 '^/.*pmix' '^$' "$debian"
else
  echo "ok   (no Debian Open MPI with an external PMIx here: its case not checked)"
fi
if [[ $fails -gt 0 ]]; then echo "FAIL: $fails check(s) of scripts/gpu-bundle-pmix.sh failed" >&2; exit 1; fi
echo "ok   scripts/gpu-bundle-pmix.sh: every check passed"
