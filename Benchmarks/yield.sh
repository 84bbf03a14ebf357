#!/usr/bin/env bash
# Does a discretionary sync yield to the player's own traffic (issue 5)? On a link limited with
# tc tbf in a network namespace, side by side in one run:
#   1. a curl download alone (the link's rate as the player sees it);
#   2. the same curl while `sync --discretionary` runs (cap far above the link, so only yielding
#      can leave room), against the target of at least 80% of the link;
#   3. the discretionary sync's rate before, during and after the competing download (it must take
#      the link back when the competitor stops);
#   4. for contrast, the same curl while a plain `sync` runs (no yielding).
#
# The link: tc tbf on a router namespace between nginx and the player's namespace, a 20 ms round
# trip (Benchmarks/delayline.py), and the origin's TCP congestion control CC: cubic by default, the
# Linux default and what most servers run, whose flows fill the router's buffer (the queue the sync
# watches). bbr keeps queues short by design, so there is less delay to see: run it too.
#
#   bash Benchmarks/yield.sh [RATE_MIB [CC]]     (root: the network namespaces; default 20 cubic)
set -euo pipefail
cd "$(dirname "$0")/.."
RATE_MIB=${1:-20}
CC=${2:-cubic}
BIN=$(pwd)/.build/release
. Benchmarks/lib.sh
swift build -c release --product patchsync >/dev/null
missing=""
for tool in nginx:nginx tc:iproute2 bc:bc curl:curl; do command -v "${tool%%:*}" >/dev/null || missing="$missing ${tool##*:}"; done
if [ -n "$missing" ]; then apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $missing >/dev/null; fi
[ "$(id -u)" = 0 ] || { echo "run as root: the rate-limited link needs a network namespace" >&2; exit 77; }

WORK=$(mktemp -d /var/tmp/patchsync-yield.XXXXXX)
NS=psyield$$
NGINX_PID="" SYNC_PID="" DELAYLINE_PID=""
cleanup() {
  [ -n "$SYNC_PID" ] && kill "$SYNC_PID" 2>/dev/null
  [ -n "$NGINX_PID" ] && kill "$NGINX_PID" 2>/dev/null
  [ -n "$DELAYLINE_PID" ] && kill "$DELAYLINE_PID" 2>/dev/null
  ip netns del "$NS" 2>/dev/null || true
  ip netns del "r$NS" 2>/dev/null || true
  ip link del "v$NS" 2>/dev/null || true
  wait 2>/dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT
now() { date +%s.%N; }
log() { echo "== $*" >&2; }
psync() { "$BIN/patchsync" "$@"; }

log "a 768 MiB build of random bytes"
mkdir -p "$WORK/build" "$WORK/www/raw"
for i in $(seq 12); do openssl rand $((64 << 20)) > "$WORK/build/part-$i.bin"; done
cat "$WORK"/build/part-{1,2,3,4,5,6,7,8}.bin > "$WORK/www/raw/big.bin"   # what curl downloads
psync keygen --out "$WORK/keys" >/dev/null
psync repo init --origin "$WORK/www/origin" --root-key "$WORK/keys/root.key" --targets-key "$WORK/keys/targets.key" --online-key "$WORK/keys/online.key" >/dev/null
psync publish "$WORK/build" --origin "$WORK/www/origin" --build-id 1 --targets-key "$WORK/keys/targets.key" --online-key "$WORK/keys/online.key" >/dev/null 2>&1

start_nginx

log "a ${RATE_MIB} MiB/s link with a 20 ms round trip (tc tbf and a delay line on a router between the origin and the player)"
make_routed_link "$NS" 10.214 "$((RATE_MIB * 1048576 * 8))" 256kb 20 "$CC"
BASE="http://10.214.0.1:$PORT"

competitor() {  # competitor SECONDS: MiB/s a curl download gets over that time
  local bytes
  bytes=$(ip netns exec "$NS" curl -s -o /dev/null --max-time "$1" -w '%{size_download}' "$BASE/raw/big.bin" || true)
  echo "$bytes / $1 / 1048576" | bc -l
}
done_bytes() {  # bytes the running sync has fetched, from `status --json` (another process)
  psync status --install "$1" --json | python3 -c "import json,sys; r=json.load(sys.stdin).get('running'); print(r['bytesDone'] if r else 0)"
}
fresh_bytes() {  # fresh_bytes INSTALL: "BYTES TIME" just after the running sync recorded its progress
  local first now; first=$(done_bytes "$1")
  for _ in $(seq 40); do now=$(done_bytes "$1"); [ "$now" != "$first" ] && break; sleep 0.05; done
  echo "$now $(now)"
}
rate_over() {  # rate_over INSTALL SECONDS: the sync's MiB/s over about that time
  local a b; a=$(fresh_bytes "$1"); sleep "$2"; b=$(fresh_bytes "$1")
  echo "(${b% *} - ${a% *}) / (${b#* } - ${a#* }) / 1048576" | bc -l
}
start_sync() {  # start_sync NAME [sync args]: a fresh install syncing in the namespace; sets SYNC_PID
  local dir="$WORK/$1"; shift
  psync init --install "$dir" --remote "$BASE/origin" --root "$WORK/www/origin/metadata/root.json" >/dev/null
  ip netns exec "$NS" "$BIN/patchsync" sync --install "$dir" --quiet "$@" >/dev/null 2>&1 & SYNC_PID=$!
  for _ in $(seq 100); do [ "$(done_bytes "$dir")" != 0 ] && break; sleep 0.1; done
}
stop_sync() { kill "$SYNC_PID" 2>/dev/null; wait "$SYNC_PID" 2>/dev/null || true; SYNC_PID=""; }

log "1. curl alone"
alone=$(competitor 10)
log "2-3. curl while a discretionary sync runs (its cap 1 GiB/s: only yielding leaves room)"
start_sync disc --discretionary --max-rate 1G
sleep 2
disc_before=$(rate_over "$WORK/disc" 6)
rate_over "$WORK/disc" 15 > "$WORK/during" & watcher=$!
with_disc=$(competitor 15)
wait "$watcher"; disc_during=$(cat "$WORK/during")
sleep 3
disc_after=$(rate_over "$WORK/disc" 8)
stop_sync
log "4. curl while a plain sync runs"
start_sync plain
sleep 2
with_plain=$(competitor 15)
stop_sync

pct() { printf '%.0f%%' "$(echo "100 * $1 / $2" | bc -l)"; }
echo
echo "PatchSync yielding benchmark — $(nproc) cores, $(date -u +%Y-%m-%d), a ${RATE_MIB} MiB/s link (tc tbf, 200 ms buffer), 20 ms round trip, origin TCP $CC"
printf '%-62s %8s %s\n' "" "MiB/s" "of the link"
printf '%-62s %8.2f %s\n' "curl alone" "$alone" "$(pct "$alone" "$RATE_MIB")"
printf '%-62s %8.2f %s\n' "curl while sync --discretionary runs (target ≥ 80% of alone)" "$with_disc" "$(pct "$with_disc" "$RATE_MIB"), $(pct "$with_disc" "$alone") of alone"
printf '%-62s %8.2f %s\n' "curl while a plain sync runs (6 connections, no yielding)" "$with_plain" "$(pct "$with_plain" "$RATE_MIB"), $(pct "$with_plain" "$alone") of alone"
printf '%-62s %8.2f %s\n' "discretionary sync alone, before the competitor" "$disc_before" "$(pct "$disc_before" "$RATE_MIB")"
printf '%-62s %8.2f %s\n' "discretionary sync during the competitor" "$disc_during" "$(pct "$disc_during" "$RATE_MIB")"
printf '%-62s %8.2f %s\n' "discretionary sync 3-11 s after the competitor stopped" "$disc_after" "$(pct "$disc_after" "$RATE_MIB")"
