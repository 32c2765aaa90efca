#!/usr/bin/env bash
# Names the outlined OpenMP region bodies in an omp_region_count.c report (see that file): each
# "<calls> <object> <offset>" line becomes "<calls> <function>", with addr2line from the object's symbols.
# usage: benchmarks/kernels/omp_region_names.sh /tmp/regions.txt
set -euo pipefail
while read -r calls object offset; do
  if [[ "$object" == total || "$object" == "?" ]]; then echo "$calls $object ${offset:-}"; continue; fi
  name=$(addr2line -f -C -e "$object" "$offset" 2>/dev/null | sed -n 1p)
  echo "$calls ${name:-?} ($(basename "$object"))"
done < "$1"
