#!/usr/bin/env bash
# What a launcher's download page sees, on a capped link (a namespace behind a router with tc tbf), side
# by side with curl fetching as many bytes over the same link in the same run:
#   - a fresh sync --json: seconds to the first transfer event, the longest gap between transfer events
#     while bytes flow, the reported rate against what really arrived (and against the link), how far the
#     ETA was off at a quarter, half and three quarters of the way, and the time beside curl's;
#   - a sync killed (SIGKILL) half way and run again: the update's total before and after, and where the
#     resumed bar starts;
#   - an origin frozen (SIGSTOP) at a third: seconds from its last byte to the `stalled` event, and to the
#     exit (69) at --give-up.
#
#   bash Benchmarks/progress.sh [PAIR]      PAIR: wesnoth (default) or supertuxkart; root (namespaces)
#   LINK_MBIT=32 (the link, default 32 Mbit/s = 4 MiB/s), GIVE_UP=20s
set -euo pipefail
cd "$(dirname "$0")/.."
source Benchmarks/lib.sh
[ "$(id -u)" = 0 ] || { echo "run as root (network namespaces)" >&2; exit 77; }
PAIR=${1:-wesnoth}
pair_builds "$PAIR"
need_tools nginx curl
LINK_MBIT=${LINK_MBIT:-32}
GIVE_UP=${GIVE_UP:-20s}
WORK=$(mktemp -d /tmp/patchsync-progress.XXXXXX)
NS=psprog
cleanup() {
  set +e
  [ -n "${NGINX_PID:-}" ] && { kill -CONT "$NGINX_PID"; kill "$NGINX_PID"; wait "$NGINX_PID"; } 2>/dev/null
  ip netns del "$NS"; ip netns del "r$NS"; ip link del "v$NS"
  rm -rf "$WORK"
} 2>/dev/null
trap cleanup EXIT

"$BIN/patchsync" keygen --out "$WORK/keys" >/dev/null
"$BIN/patchsync" repo init --origin "$WORK/www" --root-key "$WORK/keys/root.key" --targets-key "$WORK/keys/targets.key" --online-key "$WORK/keys/online.key" >/dev/null
ps_publish "$WORK/www" "$NEW" "$NEW_NAME" 0 >/dev/null
start_nginx
# Workers of their own: SIGSTOP on the master alone would leave them serving.
NGINX_PIDS=$(pgrep -P "$NGINX_PID" | tr '\n' ' ')
make_routed_link "$NS" 10.198 "$((LINK_MBIT * 1000000))" 256k
URL="http://10.198.0.1:$PORT"
OBJECT_BYTES=$(find "$WORK/www/objects" -type f -printf '%s\n' | awk '{ s += $1 } END { printf "%.0f\n", s }')
head -c "$OBJECT_BYTES" /dev/urandom > "$WORK/www/blob.bin"

player() { # player NAME: an install of the origin, inside the namespace's view of it
  "$BIN/patchsync" init --install "$WORK/$1" --remote "$URL" --root "$WORK/www/metadata/1.root.json" >/dev/null
}
# stamped CMD…: runs CMD in the namespace, each stdout line prefixed with the seconds since start.
stamped() {
  ip netns exec "$NS" "$@" | python3 -u -c '
import sys, time
t0 = time.monotonic()
for line in sys.stdin: print("%.3f %s" % (time.monotonic() - t0, line), end="", flush=True)'
}

echo "== $PAIR: $NEW_NAME, $OBJECT_BYTES object bytes over a $LINK_MBIT Mbit/s link"
t0=$(date +%s.%N)
ip netns exec "$NS" curl -s -o /dev/null "$URL/blob.bin"
t1=$(date +%s.%N)
CURL_SECONDS=$(echo "$t1 - $t0" | bc)

player fresh
t0=$(date +%s.%N)
stamped "$BIN/patchsync" sync --install "$WORK/fresh" --json > "$WORK/fresh.log"
t1=$(date +%s.%N)
SYNC_SECONDS=$(echo "$t1 - $t0" | bc)

player killed
( stamped "$BIN/patchsync" sync --install "$WORK/killed" --json > "$WORK/killed.log" ) &
SYNC_JOB=$!
for _ in $(seq 600); do
  python3 - "$WORK/killed.log" <<'EOF' && break
import json, sys
events = [json.loads(l.split(" ", 1)[1]) for l in open(sys.argv[1]) if " {" in l]
last = [e for e in events if e["event"] == "transfer" and e.get("bytesTotal")]
sys.exit(0 if last and last[-1]["bytesDone"] * 2 >= last[-1]["bytesTotal"] else 1)
EOF
  sleep 0.2
done
pkill -KILL -f "sync --install $WORK/killed" || true
wait "$SYNC_JOB" || true
stamped "$BIN/patchsync" sync --install "$WORK/killed" --json > "$WORK/resumed.log" || true

player frozen
( set +e; stamped "$BIN/patchsync" sync --install "$WORK/frozen" --json --give-up "$GIVE_UP" > "$WORK/frozen.log"; echo $? > "$WORK/frozen.status" ) &
SYNC_JOB=$!
for _ in $(seq 600); do
  python3 - "$WORK/frozen.log" <<'EOF' && break
import json, sys
events = [json.loads(l.split(" ", 1)[1]) for l in open(sys.argv[1]) if " {" in l]
last = [e for e in events if e["event"] == "transfer" and e.get("bytesTotal")]
sys.exit(0 if last and last[-1]["bytesDone"] * 3 >= last[-1]["bytesTotal"] else 1)
EOF
  sleep 0.2
done
FROZE_AT=$(python3 -c "import sys; print(sum(1 for _ in open(sys.argv[1])))" "$WORK/frozen.log")
kill -STOP "$NGINX_PID" $NGINX_PIDS
wait "$SYNC_JOB" || true
kill -CONT "$NGINX_PID" $NGINX_PIDS

python3 - "$WORK" "$CURL_SECONDS" "$SYNC_SECONDS" "$OBJECT_BYTES" "$LINK_MBIT" "$FROZE_AT" <<'EOF'
import json, statistics, sys
work, curl_s, sync_s, object_bytes, mbit, froze_at = sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6])
def read(name):
    rows = []
    for line in open(f"{work}/{name}.log"):
        t, _, text = line.partition(" ")
        if text.startswith("{"): rows.append((float(t), json.loads(text)))
    return rows
link = mbit * 1e6 / 8
fresh = read("fresh")
transfers = [(t, e) for t, e in fresh if e["event"] == "transfer"]
flowing = [(t, e) for t, e in transfers if 0 < e.get("bytesDone", 0) < e.get("bytesTotal", 1)]
times = [t for t, _ in flowing]
gaps = [b - a for a, b in zip(times, times[1:])]
end = transfers[-1][0]
start = next(t for t, e in transfers if e.get("bytesDone", 0) > 0)
total = transfers[-1][1]["bytesTotal"]
real_rate = total / (end - start)
middle = [e["bytesPerSecond"] for t, e in flowing if start + (end - start) * 0.2 < t < start + (end - start) * 0.8 and "bytesPerSecond" in e]
rates = [e.get("bytesPerSecond", 0) for _, e in transfers]
def eta_error(share):
    for t, e in flowing:
        if e["bytesDone"] >= share * e["bytesTotal"] and "etaSeconds" in e:
            left = end - t
            return (e["etaSeconds"] - left) / left
print(f"curl, {object_bytes} bytes:             {curl_s:6.1f} s")
print(f"patchsync sync, {total} bytes:    {sync_s:6.1f} s  = {sync_s / curl_s:.2f}x curl")
print(f"first transfer event:            {transfers[0][0]:6.2f} s after start ({start:.2f} s to the first byte counted)")
print(f"transfer events while flowing:   {len(flowing)}, longest gap {max(gaps):.2f} s, median {statistics.median(gaps):.2f} s")
print(f"reported rate, middle 60%:       median {statistics.median(middle) / 1048576:.2f} MiB/s, range {min(middle) / 1048576:.2f}-{max(middle) / 1048576:.2f}")
print(f"bytes that arrived / time:       {real_rate / 1048576:.2f} MiB/s (link {link / 1048576:.2f} MiB/s); median reported / arrived = {statistics.median(middle) / real_rate:.2f}")
print(f"highest rate ever reported:      {max(rates) / 1048576:.2f} MiB/s = {max(rates) / link:.2f}x the link; lowest {min(rates)} B/s")
print("ETA error (reported - real) / real at 25%, 50%, 75%: " + ", ".join(f"{eta_error(s):+.0%}" for s in (0.25, 0.5, 0.75)))

killed = [e for _, e in read("killed") if e["event"] == "transfer"]
resumed = [e for _, e in read("resumed") if e["event"] == "transfer"]
totals = sorted({e["bytesTotal"] for e in killed + resumed})
print(f"killed at {killed[-1]['bytesDone'] * 100 // killed[-1]['bytesTotal']}%: update totals seen before and after the kill: {totals}; "
      f"the resumed bar starts at {resumed[0]['bytesDone'] * 100 // resumed[0]['bytesTotal']}% and ends at {resumed[-1]['bytesDone'] * 100 // resumed[-1]['bytesTotal']}%; "
      f"resumed result: {read('resumed')[-1][1]['event']}")

frozen = read("frozen")
stopped = frozen[froze_at - 1][0] if froze_at else 0
last_byte = max(t for t, e in frozen if e["event"] == "transfer")
moving = [t for (t, e), (_, p) in zip(frozen[1:], frozen) if e["event"] == "transfer" and p["event"] == "transfer" and e["bytesDone"] > p["bytesDone"]]
last_progress = max(moving) if moving else stopped
stalled = [t for t, e in frozen if e["event"] == "stalled"]
status = open(f"{work}/frozen.status").read().strip()
print(f"origin frozen at {stopped:.1f} s (last byte counted {last_progress:.1f} s): stalled event {stalled[0] - last_progress:.1f} s after the last byte; "
      f"exit {status} at {frozen[-1][0] - last_progress:.1f} s (--give-up); transfer events after the stall: "
      f"{sum(1 for t, e in frozen if e['event'] == 'transfer' and t > stalled[0])} (rate shown {[e.get('bytesPerSecond') for t, e in frozen if e['event'] == 'transfer' and t > stalled[0]][:3]})" if stalled else f"no stalled event; exit {status}")
EOF
