#!/usr/bin/env bash
# Builds Cleave with CUDA on this machine and packs what a GPU host needs to test it into one relocatable
# tarball, build-gpu/cleave-gpu-bundle.tar.gz (plus build-gpu/MANIFEST.txt), for scripts/gpu-check.sh.
#
#   scripts/gpu-bundle.sh            # configure + build (own tree build-gpu-tree/), pack, print the size
#   scripts/gpu-bundle.sh --no-build # pack what build-gpu-tree/ already holds
#
# Assumes: the build machine has this project's dependencies and a CUDA toolkit with cuDNN and NCCL (CMake
# turns CLEAVE_WITH_CUDA on), Debian's Open MPI 4.x (`ompi_info --path all`), ldd, readelf/objdump, tar and
# gzip. The GPU host is assumed to have glibc and libstdc++ at least as new as this machine's (the manifest
# records the versions the bundle needs), the NVIDIA driver and the CUDA runtime libraries, and nothing else.
#
# What the bundle holds (cleave-gpu-bundle/):
#   bin/        cleave and every gpu_*_test target the build defines (discovered, not listed here)
#   lib/        every shared library those binaries, Open MPI's tools and its components load, except glibc,
#               libstdc++/libgcc_s (the host has them) and the CUDA libraries (cudart, cuBLAS(Lt), cuDNN, NCCL:
#               hundreds of MB; the host brings them)
#   mpi/        Open MPI's runtime rebuilt under a relocatable prefix (OPAL_PREFIX): orterun/mpirun, orted,
#               ompi_info, the MCA components whose libraries are all bundled, help files, configuration
#   pmix/       PMIx's components and help files (PMIX_INSTALL_PREFIX)
#   data/       the data sets the examples read (fortunes text, handwritten digits when present)
#   reference/  CPU reference runs (one folder per run: config, arguments, metrics.jsonl) that gpu-check.sh
#               replays and GPU stages compare against; add one with a `reference` line below
#   env.sh      `source`d by gpu-check.sh: points LD_LIBRARY_PATH, OPAL_PREFIX, PMIx and PATH at the bundle
#   MANIFEST.txt  commit, build flags, glibc/GLIBCXX needs, CUDA sonames needed, MCA components left out, files
#
# Environment: CLEAVE_GPU_BUILD_DIR (default build-gpu-tree), CLEAVE_CUDA_ARCHS (default "80;90": A100, H100,
# H200), JOBS (default 2), CLEAVE_BUILD_LOCK (default /tmp/cleave-build.lock; builds and the reference runs
# take it), CLEAVE_BUNDLE_MAX_MIB (default 40).
# Invariant: writes only under the build tree and build-gpu/; fails (nonzero) rather than packing a bundle
# that misses a library, a binary or a reference.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
build="${CLEAVE_GPU_BUILD_DIR:-build-gpu-tree}"
archs="${CLEAVE_CUDA_ARCHS:-80;90}"
jobs="${JOBS:-2}"
lock="${CLEAVE_BUILD_LOCK:-/tmp/cleave-build.lock}"
max_mib="${CLEAVE_BUNDLE_MAX_MIB:-40}"
out="build-gpu"
name="cleave-gpu-bundle"
do_build=1
[[ "${1:-}" == "--no-build" ]] && do_build=0

say() { printf 'gpu-bundle: %s\n' "$*"; }
die() { printf 'gpu-bundle: error: %s\n' "$*" >&2; exit 1; }
locked() { if command -v flock >/dev/null; then flock "$lock" "$@"; else "$@"; fi; }

# ---- configure and build ----------------------------------------------------------------------------------
if [[ -z "${CCACHE_DIR:-}" && -f /root/.bashrc.ccache ]]; then . /root/.bashrc.ccache; fi
launchers=()
if command -v ccache >/dev/null; then
  launchers=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
fi
if [[ $do_build -eq 1 ]]; then
  if [[ ! -f "$build/CMakeCache.txt" ]]; then
    say "configuring $build (Release, CUDA architectures $archs)"
    locked cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release "-DCMAKE_CUDA_ARCHITECTURES=$archs" \
      -DCLEAVE_BUILD_BENCHMARKS=OFF -DCLEAVE_USE_ONEDNN=OFF -DCLEAVE_USE_BLIS=OFF "${launchers[@]}" \
      >"$build.configure.log" 2>&1 \
      || { tail -n 30 "$build.configure.log" >&2; die "cmake configure failed (log: $build.configure.log)"; }
    rm -f "$build.configure.log"
  fi
fi
[[ -f "$build/CMakeCache.txt" ]] || die "$build is not configured; run without --no-build"
grep -q '^CLEAVE_ENABLE_CUDA:BOOL=ON' "$build/CMakeCache.txt" \
  || die "$build has CLEAVE_ENABLE_CUDA off"
# The GPU test targets exist only when CLEAVE_WITH_CUDA came out on; find them in the build's target list.
mapfile -t gpu_tests < <(cmake --build "$build" --target help 2>/dev/null \
                         | grep -oE '\bgpu_[A-Za-z0-9_]*_test\b' | sort -u)
[[ ${#gpu_tests[@]} -gt 0 ]] \
  || die "no gpu_*_test target in $build: CUDA was not found at configure time (see its CMake status table)"
say "GPU test targets: ${gpu_tests[*]}"
if [[ $do_build -eq 1 ]]; then
  say "building cleave ${gpu_tests[*]} (-j$jobs, under $lock)"
  locked cmake --build "$build" -j"$jobs" --target cleave "${gpu_tests[@]}"
fi

# ---- stage the bundle -------------------------------------------------------------------------------------
stage="$build/bundle-stage"
b="$stage/$name"
rm -rf "$stage"
mkdir -p "$b"/{bin,lib,mpi,pmix,data,reference}
cp "$build/bin/cleave" "$b/bin/"
for t in "${gpu_tests[@]}"; do
  f="$(find "$build/tests" -type f -name "$t" -perm -u+x | sed -n 1p)"
  [[ -n "$f" ]] || die "target $t built no executable under $build/tests"
  cp "$f" "$b/bin/"
done

# Libraries the host must bring: the C library family, the C++ runtime and the CUDA libraries.
host_lib_re='^(linux-vdso|ld-linux|libc\.so|libm\.so|libdl\.so|libpthread\.so|librt\.so|libutil\.so|libresolv\.so|libanl\.so|libstdc\+\+\.so|libgcc_s\.so)'
cuda_lib_re='^lib(cuda|cudart|cublas|cublasLt|cudnn[a-z_]*|nccl|nvrtc|nvJitLink|cufft|curand|cusparse|cusolver|nvToolsExt)\.so'

# needed_libs FILE...: "soname path" for every library ldd resolves that the bundle must carry
needed_libs() {
  ldd "$@" 2>/dev/null | awk '$2 == "=>" && $3 ~ /^\// { print $1, $3 }' | sort -u \
    | while read -r so path; do
        [[ "$so" =~ $host_lib_re || "$so" =~ $cuda_lib_re ]] || printf '%s %s\n' "$so" "$path"
      done
}
# unresolved FILE: the libraries FILE needs that ldd cannot find here
unresolved() { ldd "$1" 2>/dev/null | awk '/not found/ { print $1 }'; }

# ---- Open MPI, relocated ----------------------------------------------------------------------------------
command -v ompi_info >/dev/null || die "ompi_info not found: this script packs Debian's Open MPI 4.x"
ompi_path() { ompi_info --path all --parsable | sed -n "s/^path:$1:\(.*\)$/\1/p" | sed -n 1p; }
prefix="$(ompi_path prefix)"; bindir="$(ompi_path bindir)"; libdir="$(ompi_path libdir)"
pkglibdir="$(ompi_path pkglibdir)"; pkgdatadir="$(ompi_path pkgdatadir)"; sysconfdir="$(ompi_path sysconfdir)"
[[ -n "$prefix" && -d "$pkglibdir" ]] || die "ompi_info --path all did not name a prefix and a pkglibdir"
for d in "$libdir" "$pkglibdir" "$pkgdatadir"; do
  [[ "$d" == "$prefix"/* ]] || die "Open MPI's $d is not under its prefix $prefix: cannot relocate with OPAL_PREFIX"
done
m="$b/mpi"
mkdir -p "$m/bin" "$m/${pkglibdir#"$prefix"/}" "$m/${pkgdatadir#"$prefix"/}" "$m/etc"
for tool in orterun orted ompi_info; do
  [[ -x "$bindir/$tool" ]] || die "$bindir/$tool missing"
  cp "$bindir/$tool" "$m/bin/"
done
ln -s orterun "$m/bin/mpirun"
ln -s orterun "$m/bin/mpiexec"
cp -r "$pkgdatadir/." "$m/${pkgdatadir#"$prefix"/}/"
[[ -d "$sysconfdir" ]] && cp -r "$sysconfdir/." "$m/etc/"

# MCA components: keep one only when every library it needs is one the bundle carries anyway (Open MPI's
# own, hwloc, libevent, PMIx and the munge client it links, zlib, udev, numa, the libmca_common_* helpers);
# the rest (UCX, libfabric, verbs, PSM, netlink, OpenSHMEM) would drag in network stacks a one-node check
# never uses.
component_ok_re='^lib(mpi|open-pal|open-rte|hwloc|event[a-z_]*-2\.1|pmix|munge|z|udev|numa|mca_common_(ompio|sm|monitoring))\.so'
kept=0 left_out=()
for c in "$pkglibdir"/*.so; do
  ok=1
  while read -r so _; do
    [[ "$so" =~ $component_ok_re ]] || { ok=0; break; }
  done < <(needed_libs "$c")
  [[ -z "$(unresolved "$c")" ]] || ok=0
  if [[ $ok -eq 1 ]]; then cp "$c" "$m/${pkglibdir#"$prefix"/}/"; kept=$((kept + 1))
  else left_out+=("$(basename "$c" .so)"); fi
done
say "Open MPI $(ompi_info --parsable 2>/dev/null | sed -n 's/^ompi:version:full:\(.*\)/\1/p' | sed -n 1p):" \
    "$kept MCA components kept, ${#left_out[@]} left out (they need UCX/libfabric/verbs/PSM/netlink/OpenSHMEM)"

# PMIx (external to Debian's Open MPI): its prefix is two levels above libpmix.so.2; none when this Open MPI has no
# mca_pmix_ext*.so (scripts/gpu-bundle-pmix.sh says which, and names what is wrong otherwise).
pmix_prefix="$(bash "$repo/scripts/gpu-bundle-pmix.sh" "$pkglibdir")" || die "cannot bundle Open MPI's PMIx (above)"
if [[ -n "$pmix_prefix" ]]; then
  mkdir -p "$b/pmix/lib/pmix" "$b/pmix/share"
  for c in "$pmix_prefix"/lib/pmix/*.so; do
    [[ -e "$c" && -z "$(unresolved "$c")" ]] && cp "$c" "$b/pmix/lib/pmix/"
  done
  [[ -d "$pmix_prefix/share" ]] && cp -r "$pmix_prefix/share/." "$b/pmix/share/"
fi

# ---- shared libraries -------------------------------------------------------------------------------------
elves=("$b"/bin/* "$m"/bin/orterun "$m"/bin/orted "$m"/bin/ompi_info "$m/${pkglibdir#"$prefix"/}"/*.so)
[[ -d "$b/pmix/lib/pmix" ]] && elves+=("$b"/pmix/lib/pmix/*.so)
for f in "$b"/bin/*; do
  missing="$(unresolved "$f" | grep -Ev "$cuda_lib_re" || true)"
  [[ -z "$missing" ]] || die "$f needs libraries not found here: $missing"
done
# Copy the closure: the libraries' own needs are in ldd's transitive list already.
while read -r so path; do cp -L "$path" "$b/lib/$so"; done < <(needed_libs "${elves[@]}")
# libmca_common_* (loaded by the components) and libpmix carry their sonames; ldd found them above.

# ---- data and CPU references ------------------------------------------------------------------------------
fortunes="/usr/share/games/fortunes/cookie"
[[ -f "$fortunes" ]] || die "$fortunes missing (apt package fortunes-min); examples/gpt_fortunes.json reads it"
mkdir -p "$b/data/fortunes"
cp "$fortunes" "$b/data/fortunes/cookie"
digits="$(ls data/digits.csv.gz 2>/dev/null || find /usr/lib/python3/dist-packages -name digits.csv.gz 2>/dev/null \
          | sed -n 1p || true)"
if [[ -n "$digits" ]]; then cp "$digits" "$b/data/digits.csv.gz"
else say "note: data/digits.csv.gz not found (scripts/install-deps.sh fetches it); the digits examples are left out"; fi

# reference NAME CONFIG ARG...: a CPU run of `cleave train CONFIG ARG...` with this build's cleave. The bundle
# keeps, in reference/NAME/, the config (config.json), the arguments one per line (args.txt, with @BUNDLE@ for
# the unpacked bundle and @OUT_DIR@ for the run directory, so gpu-check.sh can replay the same run), the run's
# metrics.jsonl and a note of where and how long it ran (command.txt). The run reads the bundle's own data
# copy, as the replay will.
reference() {
  local ref="$1" config="$2"; shift 2
  local run="$build/reference-runs/$ref" dir="$b/reference/$ref" a args=()
  rm -rf "$run"
  mkdir -p "$(dirname "$run")" "$dir"
  cp "$config" "$dir/config.json"
  printf '%s\n' "$@" >"$dir/args.txt"
  for a in "$@"; do a="${a//@BUNDLE@/$(cd "$b" && pwd)}"; args+=("${a//@OUT_DIR@/$run}"); done
  say "reference $ref: cleave train $config $*"
  local t0=$SECONDS
  OMP_WAIT_POLICY=passive locked "$build/bin/cleave" train "$dir/config.json" "${args[@]}" >"$run.log" 2>&1 \
    || { tail -n 20 "$run.log" >&2; die "reference run $ref failed (log: $run.log)"; }
  [[ -s "$run/metrics.jsonl" ]] || die "reference run $ref wrote no metrics.jsonl"
  cp "$run/metrics.jsonl" "$dir/"
  printf 'cleave train config.json %s\n(took %d s on %s: %s, %s cores, OpenBLAS)\n' "$*" $((SECONDS - t0)) \
    "$(hostname)" "$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | sed -n 1p)" "$(nproc)" >"$dir/command.txt"
}
# gpt_fortunes: the README's demo model, 20 steps, loss logged every step (gpu-check.sh's cpu-reference stage
# replays it on the host's CPU, its gpu-reference stage on cuda:0, and both compare the losses with these).
reference gpt_fortunes examples/gpt_fortunes.json --set train.steps=20 --set train.log_interval=1 \
  --set train.out_dir=@OUT_DIR@ --set data.path=@BUNDLE@/data/fortunes/cookie

# ---- env.sh, manifest, tarball ----------------------------------------------------------------------------
cat >"$b/env.sh" <<EOF
# Sourced by scripts/gpu-check.sh: points the loader and Open MPI at this unpacked bundle (relocatable: every
# path is relative to this file). Written by scripts/gpu-bundle.sh.
CLEAVE_BUNDLE="\$(cd "\$(dirname "\${BASH_SOURCE[0]}")" && pwd)"
export CLEAVE_BUNDLE
export PATH="\$CLEAVE_BUNDLE/bin:\$CLEAVE_BUNDLE/mpi/bin:\$PATH"
export LD_LIBRARY_PATH="\$CLEAVE_BUNDLE/lib\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}"
export OPAL_PREFIX="\$CLEAVE_BUNDLE/mpi"
export OPAL_SYSCONFDIR="\$CLEAVE_BUNDLE/mpi/etc"
export PMIX_INSTALL_PREFIX="\$CLEAVE_BUNDLE/pmix"
export PMIX_MCA_mca_base_component_path="\$CLEAVE_BUNDLE/pmix/lib/pmix"
# One rank without mpirun needs no orted; mpirun launches on this node only (no ssh); root is allowed (the
# GPU hosts run as root); no CMA single copy (refused in some VMs and containers).
export OMPI_MCA_ess_singleton_isolated=1
export OMPI_MCA_plm=isolated
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_btl_vader_single_copy_mechanism=none
EOF

glibc_need="$(objdump -T "$b"/bin/* "$b"/lib/* 2>/dev/null | grep -oE '\bGLIBC_[0-9.]+' | sort -uV | tail -n 1)"
glibcxx_need="$(objdump -T "$b"/bin/* "$b"/lib/* 2>/dev/null | grep -oE '\bGLIBCXX_[0-9.]+' | sort -uV | tail -n 1)"
# The linked ones (NEEDED), and those opened at run time (dlopen: cuBLASLt, engine/cuda/cublaslt_library.hpp),
# whose soname the binary holds as a string.
mapfile -t cuda_sonames < <({ for f in "$b"/bin/*; do readelf -d "$f" | sed -n 's/.*Shared library: \[\(.*\)\]/\1/p'; done
                              cat "$b"/bin/* | grep -aoP 'libcublasLt\.so\.[0-9]+(?=\x00)' || true; } \
                            | grep -E "$cuda_lib_re" | sort -u)
commit="$(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
dirty="$(git status --porcelain --untracked-files=no 2>/dev/null | sed -n 1p)"
{
  echo "Cleave GPU bundle"
  echo "commit        : $commit${dirty:+ (with uncommitted changes)}"
  echo "built         : $(date -u '+%Y-%m-%d %H:%M UTC') on $(. /etc/os-release && echo "$PRETTY_NAME"), $(uname -m)"
  echo "build         : $build, Release, CUDA architectures $archs, nvcc $(cat "$build"/CMakeFiles/*/CMakeCUDACompiler.cmake 2>/dev/null | sed -n 's/^set(CMAKE_CUDA_COMPILER_VERSION "\(.*\)")/\1/p' | sed -n 1p)"
  echo "binaries      : $(cd "$b/bin" && echo *)"
  echo "host needs    : $glibc_need (glibc), $glibcxx_need (libstdc++), the NVIDIA driver (libcuda.so.1)"
  echo "CUDA sonames  : ${cuda_sonames[*]}"
  echo "MCA left out  : ${left_out[*]:-none}"
  echo "references    : $(cd "$b/reference" && echo *)"
  echo "files:"
  (cd "$b" && find . \( -type f -o -type l \) -printf '%10s  %P\n' | sort -k2)
} >"$b/MANIFEST.txt"
printf '%s\n' "${cuda_sonames[@]}" >"$b/cuda-sonames.txt"

mkdir -p "$out"
rm -f "$out/$name.tar.gz" "$out/MANIFEST.txt"
tar -C "$stage" -czf "$out/$name.tar.gz" "$name"
cp "$b/MANIFEST.txt" "$out/MANIFEST.txt"
rm -rf "$stage"
bytes="$(stat -c %s "$out/$name.tar.gz")"
mib="$(awk -v b="$bytes" 'BEGIN { printf "%.1f", b / 1048576 }')"
say "wrote $out/$name.tar.gz: $mib MiB ($bytes bytes; limit $max_mib MiB), manifest $out/MANIFEST.txt"
say "host needs $glibc_need and $glibcxx_need; CUDA libraries from the host: ${cuda_sonames[*]}"
if (( bytes > max_mib * 1048576 )); then die "the bundle is over $max_mib MiB"; fi
# What a device call uploads: the files git would list (tracked, and untracked ones it does not ignore) plus
# build-gpu/ (carried); the device takes at most 64 MiB. Missing tracked files (deleted, not yet committed) count 0.
tree_bytes="$(git ls-files -z --cached --others --exclude-standard 2>/dev/null | du -cb --files0-from=- 2>/dev/null \
              | sed -n '$s/[[:space:]].*//p' || true)"
upload=$(( ${tree_bytes:-0} + $(du -sb "$out" | cut -f1) ))
upload_mib="$(awk -v b="$upload" 'BEGIN { printf "%.1f", b / 1048576 }')"
say "a device call uploads $upload_mib MiB of its 64 MiB: the tree git lists ($(awk -v b="${tree_bytes:-0}" \
    'BEGIN { printf "%.1f", b / 1048576 }') MiB) and $out/ (carry [\"$out\"] only, never $build/)"
if (( upload > 64 * 1048576 )); then
  die "the upload would be $upload_mib MiB, over the device's 64 MiB: remove or ignore large untracked files"
fi
say "next: upload the tree with build-gpu/ and run: bash scripts/gpu-check.sh OUTDIR"
