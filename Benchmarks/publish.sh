#!/usr/bin/env bash
# Publish speed (issue 9, part 5): `patchsync publish` of a whole build into an empty origin, side by
# side with `casync make` of the same tree into an empty store (its default 64 KiB chunks, zstd) and
# `openssl dgst -sha256` over every file, in the same run, with the tree in the page cache. Both
# write to one fresh ext4 file system (a loop-mounted image): on a file system that has seen many
# deletions, ext4 slows every file creation (recently_deleted), which would charge this machine's
# history to whichever tool creates more files. Prints seconds, MB/s and the ratios, and the floor:
# what chunking, hashing and compressing (zstd 3, publish's default) the tree cost on two cores with no file written
# (`patchsync-bench publish-limit`). Target: publish throughput ≥ 3× casync make's.
#
#   sudo bash Benchmarks/publish.sh [wesnoth|supertuxkart] [--delta-sources N]
#
# The first argument picks the new build of a pair from Benchmarks/datasets.sh (default wesnoth).
# FRESH_FS=0 writes under /tmp instead of a fresh file system (no root needed).
set -euo pipefail
cd "$(dirname "$0")/.."
PAIR=${1:-wesnoth}
. Benchmarks/lib.sh
need_tools casync openssl bc
pair_builds "$PAIR"
[ -x "$BIN/patchsync-bench" ] || swift build -c release --product patchsync-bench >/dev/null
NAME=$NEW_NAME TREE=$NEW
BYTES=$(find "$TREE" -type f -printf '%s\n' | awk '{ s += $1 } END { printf "%.0f\n", s }')
WORK=$(mktemp -d /tmp/patchsync-publish.XXXXXX)
IMAGE=""
trap 'mountpoint -q "$WORK" && umount "$WORK"; rm -rf "$WORK" ${IMAGE:+"$IMAGE"}' EXIT
if [ "${FRESH_FS:-1}" = 1 ]; then
  [ "$(id -u)" = 0 ] || { echo "run as root (a loop-mounted file system), or with FRESH_FS=0" >&2; exit 77; }
  IMAGE=$(mktemp /var/tmp/patchsync-publish-fs.XXXXXX)
  truncate -s $(( BYTES * 3 + (1 << 30) )) "$IMAGE"
  mkfs.ext4 -q -F "$IMAGE"
  mount -o loop "$IMAGE" "$WORK"
fi
now() { date +%s.%N; }
find "$TREE" -type f -print0 | xargs -0 cat > /dev/null   # the same warm page cache for every tool

"$BIN/patchsync" keygen --out "$WORK/keys" >/dev/null
"$BIN/patchsync" repo init --origin "$WORK/origin" --root-key "$WORK/keys/root.key" --targets-key "$WORK/keys/targets.key" --online-key "$WORK/keys/online.key" >/dev/null
sync
ps_s=$(ps_publish "$WORK/origin" "$TREE" "$NAME" 0)   # publish fsyncs (syncfs) before it returns
t0=$(now); casync make --store="$WORK/store" "$WORK/tree.caidx" "$TREE" >/dev/null; sync; t1=$(now)  # the same durability
ca_s=$(echo "scale=2; ($t1 - $t0) / 1" | bc)
t0=$(now); find "$TREE" -type f -print0 | xargs -0 openssl dgst -sha256 > /dev/null; t1=$(now)
dg_s=$(echo "scale=2; ($t1 - $t0) / 1" | bc)
fl_s=$(printf '%.2f' "$("$BIN/patchsync-bench" publish-limit "$TREE" 2 | python3 -c "import json,sys; print(json.load(sys.stdin)['seconds'])")")

echo "$NAME: $(find "$TREE" -type f | wc -l) files, $BYTES bytes; origin $(du -sb "$WORK/origin/objects" | cut -f1) bytes, casync store $(du -sb "$WORK/store" | cut -f1) bytes"
printf '%-52s %9s %9s %16s\n' "what" "seconds" "MB/s" "÷ casync make"
for row in "patchsync publish (chunk, SHA-256, zstd, fsync)|$ps_s" "casync make (64 KiB chunks, zstd)|$ca_s" "openssl dgst -sha256 (hash only)|$dg_s" "floor: chunk, SHA-256, zstd 3 on 2 cores, no writes|$fl_s"; do
  IFS='|' read -r what s <<<"$row"
  printf '%-52s %9s %9s %16s\n' "$what" "$s" "$(echo "scale=1; $BYTES / 1000000 / $s" | bc)" "$(echo "scale=2; $ca_s / $s" | bc)"
done
echo "3× casync make needs publish within $(echo "scale=2; $ca_s / 3" | bc) s; publish's CPU work alone (the floor) takes $fl_s s"
