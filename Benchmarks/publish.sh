#!/usr/bin/env bash
# Publish speed (issue 9, part 5): `patchsync publish` of a whole build into an empty origin, side by
# side with `casync make` of the same tree into an empty store (its default 64 KiB chunks, zstd) and
# `openssl dgst -sha256` over every file, in the same run, with the tree in the page cache. Prints
# seconds, MB/s and the ratios. Target: publish throughput ≥ 3× casync make's.
#
#   sudo bash Benchmarks/publish.sh [wesnoth|supertuxkart] [--delta-sources N]
#
# The first argument picks the new build of a pair from Benchmarks/datasets.sh (default wesnoth).
set -euo pipefail
cd "$(dirname "$0")/.."
PAIR=${1:-wesnoth}
. Benchmarks/lib.sh
need_tools casync openssl bc
pair_builds "$PAIR"
NAME=$NEW_NAME TREE=$NEW
WORK=$(mktemp -d /tmp/patchsync-publish.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
now() { date +%s.%N; }
BYTES=$(find "$TREE" -type f -printf '%s\n' | awk '{ s += $1 } END { print s }')
find "$TREE" -type f -print0 | xargs -0 cat > /dev/null   # the same warm page cache for every tool

"$BIN/patchsync" keygen --out "$WORK/keys" >/dev/null
"$BIN/patchsync" repo init --origin "$WORK/origin" --root-key "$WORK/keys/root.key" --online-key "$WORK/keys/online.key" >/dev/null
sync
ps_s=$(ps_publish "$WORK/origin" "$TREE" "$NAME" 0)   # publish fsyncs (syncfs) before it returns
t0=$(now); casync make --store="$WORK/store" "$WORK/tree.caidx" "$TREE" >/dev/null; sync; t1=$(now)  # the same durability
ca_s=$(echo "scale=2; ($t1 - $t0) / 1" | bc)
t0=$(now); find "$TREE" -type f -print0 | xargs -0 openssl dgst -sha256 > /dev/null; t1=$(now)
dg_s=$(echo "scale=2; ($t1 - $t0) / 1" | bc)

echo "$NAME: $(find "$TREE" -type f | wc -l) files, $BYTES bytes; origin $(du -sb "$WORK/origin/objects" | cut -f1) bytes, casync store $(du -sb "$WORK/store" | cut -f1) bytes"
printf '%-52s %9s %9s %16s\n' "what" "seconds" "MB/s" "÷ casync make"
for row in "patchsync publish (chunk, SHA-256, deflate, fsync)|$ps_s" "casync make (64 KiB chunks, zstd)|$ca_s" "openssl dgst -sha256 (hash only)|$dg_s"; do
  IFS='|' read -r what s <<<"$row"
  printf '%-52s %9s %9s %16s\n' "$what" "$s" "$(echo "scale=1; $BYTES / 1000000 / $s" | bc)" "$(echo "scale=2; $ca_s / $s" | bc)"
done
