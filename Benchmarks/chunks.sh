#!/usr/bin/env bash
# The chunk-size study (issue 9, part 4): Benchmarks/patch.sh's PatchSync rows at average chunk sizes
# of 16, 64, 256 KiB and 1 MiB (min a quarter, max 4× the average), with and without deltas: patch
# bytes, requests per patch, the new build's manifest size (gzip'd) and its publish time.
#
#   sudo bash Benchmarks/chunks.sh [PAIR…]     (default: wesnoth supertuxkart)
set -euo pipefail
cd "$(dirname "$0")/.."
PAIRS=${*:-wesnoth supertuxkart}
SUMMARY=$(mktemp /tmp/patchsync-chunks.XXXXXX)
trap 'rm -f "$SUMMARY"' EXIT
for pair in $PAIRS; do
  for kib in 16 64 256 1024; do
    echo "chunks.sh: $pair at $kib KiB" >&2
    PATCH_SUMMARY=$SUMMARY PATCH_ONLY_PATCHSYNC=1 bash Benchmarks/patch.sh "$pair" "$kib" >/dev/null
  done
done
printf '%-14s %8s %-8s %14s %9s %14s %10s\n' "pair" "avg KiB" "route" "patch bytes" "requests" "manifest bytes" "publish s"
while read -r pair kib variant bytes requests manifest publish; do
  printf '%-14s %8s %-8s %14s %9s %14s %10s\n' "$pair" "$kib" "$variant" "$bytes" "$requests" "$manifest" "$publish"
done < "$SUMMARY"
