#!/usr/bin/env bash
# One origin, one seed and four players on a LAN, the origin behind a capped link (a studio's uplink,
# a household's DSL), in network namespaces on one bridge, side by side in one run:
#   - without sharing: the four players sync from the origin at once;
#   - with sharing: the seed syncs from the origin and runs `patchsync share`, then the four players
#     sync at once with `--peer` the seed.
# Prints, for each, the seconds until all are installed (the seed's own sync counted) and the object
# bytes the origin sent (its access log), then the ratios (target: the origin serves the build about
# once with sharing). Every install is checked byte-exact against the build.
#
#   bash Benchmarks/share.sh [PAIR]      PAIR: wesnoth (default) or supertuxkart; root (namespaces)
#   LINK_MBIT=100 (the origin's link, default 100 Mbit/s), PLAYERS=4
set -euo pipefail
cd "$(dirname "$0")/.."
source Benchmarks/lib.sh
[ "$(id -u)" = 0 ] || { echo "run as root (network namespaces)" >&2; exit 77; }
PAIR=${1:-wesnoth}
pair_builds "$PAIR"
need_tools nginx curl
LINK_MBIT=${LINK_MBIT:-100}
PLAYERS=${PLAYERS:-4}
WORK=$(mktemp -d /tmp/patchsync-share.XXXXXX)
BR=psshbr
NET=10.199.0
cleanup() {
  set +e
  for ns in "${SPACES[@]:-}"; do [ -n "$ns" ] && ip netns pids "$ns" 2>/dev/null | xargs -r kill 2>/dev/null; done
  sleep 0.5
  for ns in "${SPACES[@]:-}"; do [ -n "$ns" ] && { ip netns del "$ns"; ip link del "${ns}v"; } 2>/dev/null; done
  ip link del "$BR" 2>/dev/null
  chmod -R u+w "$WORK" 2>/dev/null; rm -rf "$WORK"
}
SPACES=()
trap cleanup EXIT

# space NAME NUMBER: a namespace on the bridge at NET.NUMBER
space() {
  local ns=$1 n=$2
  ip netns add "$ns"; SPACES+=("$ns")
  ip link add "${ns}v" type veth peer name "${ns}p"
  ip link set "${ns}p" netns "$ns"
  ip link set "${ns}v" master "$BR" up
  ip netns exec "$ns" ip addr add "$NET.$n/24" dev "${ns}p"
  ip netns exec "$ns" ip link set "${ns}p" up
  ip netns exec "$ns" ip link set lo up
}
ip link add "$BR" type bridge; ip link set "$BR" up
space psorigin 2
# The origin's link: what it sends toward the players, capped.
ip netns exec psorigin tc qdisc add dev psoriginp root tbf rate "${LINK_MBIT}mbit" burst 256k latency 200ms
for i in $(seq 0 "$PLAYERS"); do space "psp$i" $((10 + i)); done

"$BIN/patchsync" keygen --out "$WORK/keys" >/dev/null
"$BIN/patchsync" repo init --origin "$WORK/www" --root-key "$WORK/keys/root.key" --targets-key "$WORK/keys/targets.key" --online-key "$WORK/keys/online.key" >/dev/null
ps_publish "$WORK/www" "$NEW" "$NEW_NAME" 0 >/dev/null
mkdir -p "$WORK/nginx/tmp"
cat > "$WORK/nginx/nginx.conf" <<CONF
daemon off; user root root; worker_processes 2; pid $WORK/nginx/pid; error_log $WORK/nginx/error.log warn;
events { worker_connections 1024; }
http { log_format bytes '\$request_uri \$status \$body_bytes_sent'; access_log $WORK/access.log bytes;
  sendfile on; keepalive_requests 100000; client_body_temp_path $WORK/nginx/tmp;
  server { listen $NET.2:8080; root $WORK/www; } }
CONF
ip netns exec psorigin nginx -p "$WORK/nginx" -c "$WORK/nginx/nginx.conf" &
for _ in $(seq 100); do ip netns exec psp0 curl -s -o /dev/null "http://$NET.2:8080/metadata/root.json" && break; sleep 0.1; done
ORIGIN=http://$NET.2:8080
origin_bytes() { awk '$1 ~ /^\/objects\// && $2 ~ /^2/ { s += $3 } END { printf "%.0f\n", s }' "$WORK/access.log"; }
expected=$(cd "$NEW" && find . -type f -print0 | sort -z | xargs -0 sha256sum | sha256sum | cut -d' ' -f1)
check() {  # check ROOT: the install's tree is the build's
  local got; got=$(cd "$1/current/" && find . -type f -print0 | sort -z | xargs -0 sha256sum | sha256sum | cut -d' ' -f1)
  [ "$got" = "$expected" ] || { echo "$1 is not the build" >&2; exit 1; }
}
player() {  # player NS ROOT ARGS…: init, sync, apply
  local ns=$1 root=$2; shift 2
  ip netns exec "$ns" "$BIN/patchsync" init --install "$root" --remote "$ORIGIN" --root "$WORK/www/metadata/root.json" >/dev/null
  ip netns exec "$ns" "$BIN/patchsync" sync --install "$root" --json "$@" | tail -n 1 >"$root.report.json"
  ip netns exec "$ns" "$BIN/patchsync" apply --install "$root" >/dev/null
}
now() { date +%s.%N; }

# Without sharing: the players at once, all from the origin.
before=$(origin_bytes); t0=$(now)
pids=()
for i in $(seq 1 "$PLAYERS"); do player "psp$i" "$WORK/alone$i" & pids+=($!); done
wait "${pids[@]}"
t1=$(now); alone_bytes=$(( $(origin_bytes) - before ))
for i in $(seq 1 "$PLAYERS"); do check "$WORK/alone$i"; done
alone_s=$(echo "$t1 - $t0" | bc)

# With sharing: the seed from the origin, then its share; the players at once with --peer.
before=$(origin_bytes); t0=$(now)
player psp0 "$WORK/seed"
ip netns exec psp0 "$BIN/patchsync" share --install "$WORK/seed" --share-rate 1G 2>/dev/null &
SHARE_PID=$!
for _ in $(seq 100); do ip netns exec psp1 curl -s -o /dev/null "http://$NET.10:27472/" && break; sleep 0.1; done
seeded=$(now)
pids=()
for i in $(seq 1 "$PLAYERS"); do player "psp$i" "$WORK/shared$i" --peer "http://$NET.10:27472" & pids+=($!); done
wait "${pids[@]}"
t1=$(now); shared_bytes=$(( $(origin_bytes) - before ))
kill "$SHARE_PID" 2>/dev/null || true
for i in $(seq 1 "$PLAYERS"); do check "$WORK/shared$i"; done
shared_s=$(echo "$t1 - $t0" | bc); seed_s=$(echo "$seeded - $t0" | bc)
build_bytes=$(du -sb "$NEW" | cut -f1)
objects=$(find "$WORK/www/objects" -type f ! -path '*/.incoming/*' -printf '%s\n' | awk '{ s += $1 } END { printf "%.0f\n", s }')

printf '\n%s, %s MB of files (%s MB of objects), the origin on a %s Mbit/s link, %s players\n' \
  "$NEW_NAME" "$((build_bytes / 1000000))" "$((objects / 1000000))" "$LINK_MBIT" "$PLAYERS"
printf '%-34s %12s %18s\n' "" "all installed" "origin bytes"
printf '%-34s %11.1fs %18s\n' "$PLAYERS players from the origin" "$alone_s" "$alone_bytes"
printf '%-34s %11.1fs %18s   (seed %.1fs)\n' "1 seed + $PLAYERS players from its share" "$shared_s" "$shared_bytes" "$seed_s"
printf 'origin bytes with sharing / the objects once: %.2f; without sharing: %.2f\n' \
  "$(echo "$shared_bytes / $objects" | bc -l)" "$(echo "$alone_bytes / $objects" | bc -l)"
printf 'time with sharing / without: %.2f\n' "$(echo "$shared_s / $alone_s" | bc -l)"
# Where each sharing player's bytes came from, and why a peer was dropped.
for i in $(seq 1 "$PLAYERS"); do
  python3 - "$WORK/shared$i.report.json" "$i" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
peers = r.get("peers") or []
why = "; ".join(p["dropped"] for p in peers if p.get("dropped")) or "kept"
misses = sum(p.get("misses", 0) for p in peers)
print(f"player {sys.argv[2]}: {r['bytesFromPeers']:>11} B from the peer, {r['bytesFromOrigin']:>11} B from the origin; "
      f"{misses} misses; peer: {why}")
PY
done
