#!/usr/bin/env bash
# A fresh install of a real game build through nginx on loopback, side by side in one run:
#   - PatchSync: `sync` then `apply` into an empty install (TUF refresh, manifest, range requests,
#     inflate, SHA-256 per chunk, staging, durable records), from an origin published with packs;
#   - `curl -s URL/tree.tar.gz | tar -xz`: the same tree as one gzip -6 tarball, no verification;
#   - `casync extract` from an HTTP store of the same tree, when casync is installed.
# Prints seconds, requests, bytes served, user and sys seconds, and PatchSync / curl|tar (target <= 1.0,
# with <= 100 requests). The build is the newer one of the pair (Benchmarks/datasets.sh).
#
#   bash Benchmarks/fresh-install.sh [PAIR]      PAIR: wesnoth (default) or supertuxkart
#   PUBLISH_ARGS="--small-file 0" bash Benchmarks/fresh-install.sh    (no packs: every file its own object)
# As root, it then runs PatchSync and curl|tar once more over a routed link like a player's
# (make_routed_link: LINK_MBIT, default 100 Mbit/s, and a LINK_RTT_MS round trip, default 20 ms; plain
# HTTP/1.1), target <= 1.25; LINK_MBIT=0 skips it.
set -euo pipefail
cd "$(dirname "$0")/.."
source Benchmarks/lib.sh
PAIR=${1:-wesnoth}
pair_builds "$PAIR"
need_tools nginx curl
WORK=$(mktemp -d /tmp/patchsync-fresh.XXXXXX)
IMAGE=""
NS=psfresh
cleanup() {
  set +e  # every step runs, whatever failed before it
  [ -n "${DELAYLINE_PID:-}" ] && kill "$DELAYLINE_PID" 2>/dev/null
  if [ -n "${LINKED:-}" ]; then ip netns del "$NS"; ip netns del "r$NS"; ip link del "v$NS"; fi 2>/dev/null
  [ -n "${NGINX_PID:-}" ] && kill "$NGINX_PID" 2>/dev/null; wait 2>/dev/null
  chmod -R u+w "$WORK" 2>/dev/null; mountpoint -q "$WORK" && umount "$WORK"; rm -rf "$WORK" ${IMAGE:+"$IMAGE"}
}
trap cleanup EXIT
# Every tool writes to one fresh ext4 file system (a loop-mounted image), as publish.sh does: on a file
# system that has seen millions of files deleted, each file creation pays for that history (ext4's
# recently-deleted checks, discards), and it charges whichever tool creates more files. FRESH_FS=0 runs
# on /tmp's file system instead.
if [ "${FRESH_FS:-1}" = 1 ]; then
  [ "$(id -u)" = 0 ] || { echo "run as root (a loop-mounted file system), or with FRESH_FS=0" >&2; exit 77; }
  BYTES=$(find "$NEW" -type f -printf '%s\n' | awk '{ s += $1 } END { printf "%.0f\n", s }')
  IMAGE=$(mktemp /var/tmp/patchsync-fresh-fs.XXXXXX)
  truncate -s $(( BYTES * 5 + (1 << 30) )) "$IMAGE"
  mkfs.ext4 -q -F "$IMAGE"
  mount -o loop "$IMAGE" "$WORK"
fi
mkdir -p "$WORK/www"
export NGINX_ACCESS_LOG=$WORK/access.log

"$BIN/patchsync" keygen --out "$WORK/keys" >/dev/null
"$BIN/patchsync" repo init --origin "$WORK/www/origin" --root-key "$WORK/keys/root.key" --targets-key "$WORK/keys/targets.key" --online-key "$WORK/keys/online.key" >/dev/null
# shellcheck disable=SC2086
publish_s=$(ps_publish "$WORK/www/origin" "$NEW" "$NEW_NAME" 0 ${PUBLISH_ARGS:-})
objects=$(find "$WORK/www/origin/objects" -type f ! -path '*/.incoming/*' | wc -l)
tar -C "$NEW" -cf - . | gzip -6 > "$WORK/www/tree.tar.gz"
start_nginx
URL=http://127.0.0.1:$PORT

# timed LABEL COMMAND…: runs COMMAND (its output dropped); prints "LABEL real user sys requests bytes".
timed() {
  local label=$1 offset; shift
  sync; sleep 1; offset=$(stat -c %s "$NGINX_ACCESS_LOG" 2>/dev/null || echo 0)
  local times
  times=$( { TIMEFORMAT='%R %U %S'; time "$@" >/dev/null 2>&1; } 2>&1 )
  read -r bytes requests <<<"$(served_since "$offset" /)"
  echo "$label $times $requests $bytes"
}

# Alternating runs (RUNS, default 3), each into a fresh folder that is deleted and synced away after
# it, so that the disk's writeback and discards of one run do not land on the other's; medians printed.
median_row() { sort -k2 -n | awk '{a[NR]=$0} END {print a[int((NR+1)/2)]}'; }
tar_rows=""; synced_rows=""; ps_rows=""
for run in $(seq "${RUNS:-3}"); do
  mkdir -p "$WORK/tar"
  tar_rows+="$(timed "curl|tar" bash -c "curl -s '$URL/tree.tar.gz' | tar -xz -C '$WORK/tar'")"$'\n'
  rm -rf "$WORK/tar"; mkdir -p "$WORK/tar"
  # the same, made durable as PatchSync makes its staged files (one syncfs at the end)
  synced_rows+="$(timed "curl|tar, then syncfs" bash -c "curl -s '$URL/tree.tar.gz' | tar -xz -C '$WORK/tar' && sync -f '$WORK/tar'")"$'\n'
  rm -rf "$WORK/tar"
  "$BIN/patchsync" init --install "$WORK/game" --remote "$URL/origin" --root "$WORK/www/origin/metadata/root.json" >/dev/null
  ps_rows+="$(timed "patchsync" bash -c "'$BIN/patchsync' sync --install '$WORK/game' --quiet && '$BIN/patchsync' apply --install '$WORK/game'")"$'\n'
  diff -r "$NEW" "$WORK/game/current" >/dev/null || { echo "fresh-install.sh: the install differs from the build" >&2; exit 1; }
  current_row=$(timed "patchsync (up to date)" "$BIN/patchsync" sync --install "$WORK/game" --quiet)
  chmod -R u+w "$WORK/game"; rm -rf "$WORK/game"
done
tar_row=$(printf '%s' "$tar_rows" | median_row)
synced_row=$(printf '%s' "$synced_rows" | median_row)
ps_row=$(printf '%s' "$ps_rows" | median_row)
casync_row=""
if command -v casync >/dev/null; then
  mkdir -p "$WORK/www/casync"
  casync make --store="$WORK/www/casync/store.castr" "$WORK/www/casync/tree.caidx" "$NEW" >/dev/null
  casync_row=$(timed "casync extract" casync extract --store="$URL/casync/store.castr" "$URL/casync/tree.caidx" "$WORK/casync-out")
fi

files=$(find "$NEW" -type f | wc -l)
echo "$NEW_NAME: $files files, $(du -sb "$NEW" | cut -f1) bytes; publish $publish_s s into $objects object files"
printf '%-24s %9s %9s %9s %9s %13s\n' "what" "seconds" "user" "sys" "requests" "bytes"
for row in "$tar_row" "$synced_row" "$ps_row" "$current_row" "$casync_row"; do
  [ -n "$row" ] || continue
  # the label may hold spaces: the last five fields are the figures
  echo "$row" | awk '{n=NF; l=""; for (i=1; i<=n-5; i++) l=l (i>1?" ":"") $i; printf "%-24s %9.2f %9.2f %9.2f %9d %13d\n", l, $(n-4), $(n-3), $(n-2), $(n-1), $n}'
done
read -r _ tar_s _ <<<"$tar_row"
ps_s=$(echo "$ps_row" | awk '{print $2}')
synced_s=$(echo "$synced_row" | awk '{print $(NF-4)}')
printf 'ratio patchsync / curl|tar: %.2f (target <= 1.0); / curl|tar then syncfs: %.2f\n' \
  "$(echo "$ps_s / $tar_s" | bc -l)" "$(echo "$ps_s / $synced_s" | bc -l)"

# --- the same over a routed link with a player's round trip ------------------------------------------
if [ "$(id -u)" = 0 ] && [ "${LINK_MBIT:-100}" != 0 ]; then
  LINKED=1; make_routed_link "$NS" 10.217 "$(( ${LINK_MBIT:-100} * 1000000 ))" 256kb "${LINK_RTT_MS:-20}"
  LINK_URL=http://10.217.0.1:$PORT
  for _ in $(seq 50); do ip netns exec "$NS" curl -s -o /dev/null "$LINK_URL/tree.tar.gz" -r 0-0 && break; sleep 0.2; done
  mkdir -p "$WORK/tar"
  link_tar=$(timed "curl|tar (link)" ip netns exec "$NS" bash -c "curl -s '$LINK_URL/tree.tar.gz' | tar -xz -C '$WORK/tar'")
  rm -rf "$WORK/tar"
  "$BIN/patchsync" init --install "$WORK/game" --remote "$LINK_URL/origin" --root "$WORK/www/origin/metadata/root.json" >/dev/null
  link_ps=$(timed "patchsync (link)" ip netns exec "$NS" bash -c "'$BIN/patchsync' sync --install '$WORK/game' --quiet && '$BIN/patchsync' apply --install '$WORK/game'")
  diff -r "$NEW" "$WORK/game/current" >/dev/null || { echo "fresh-install.sh: the install over the link differs from the build" >&2; exit 1; }
  echo "over a routed link: ${LINK_MBIT:-100} Mbit/s, ${LINK_RTT_MS:-20} ms round trip, HTTP/1.1"
  for row in "$link_tar" "$link_ps"; do
    echo "$row" | awk '{n=NF; l=""; for (i=1; i<=n-5; i++) l=l (i>1?" ":"") $i; printf "%-24s %9.2f %9.2f %9.2f %9d %13d\n", l, $(n-4), $(n-3), $(n-2), $(n-1), $n}'
  done
  printf 'ratio patchsync / curl|tar over the link: %.2f (target <= 1.25)\n' \
    "$(echo "$(echo "$link_ps" | awk '{print $(NF-4)}') / $(echo "$link_tar" | awk '{print $(NF-4)}')" | bc -l)"
fi
