#!/usr/bin/env bash
# Chosen bundles and playable first, on the sample game (about 100 MB at scale 1): bytes a
# required-only install downloads against a full one, and, through a capped link (sync --max-rate),
# the time until the build is playable (the required part staged and ready) against the time until
# every bundle is, and against curl fetching every object of the origin at the same cap (one process,
# one connection reused, as a plain full download would).
#
#   bash Benchmarks/bundles.sh [SCALE] [RATE]     defaults: 1.0 and 8M (bytes per second, K/M/G)
#
# Uses the release build (make release). Prints a table for Benchmarks/RESULTS.md.
set -euo pipefail
SCALE=${1:-1.0}
RATE=${2:-8M}
BIN=$(cd "$(dirname "$0")/.." && pwd)/.build/release
[ -x "$BIN/patchsync" ] && [ -x "$BIN/patchsync-sample" ] || { echo "bundles.sh: run make release first" >&2; exit 1; }
command -v curl >/dev/null || { echo "bundles.sh: curl is needed: apt-get install curl" >&2; exit 1; }
WORK=$(mktemp -d /tmp/patchsync-bundles.XXXXXX)
SERVE_PID=""
cleanup() { [ -n "$SERVE_PID" ] && kill "$SERVE_PID" 2>/dev/null; wait 2>/dev/null; rm -rf "$WORK"; }
trap cleanup EXIT
P="$BIN/patchsync"

"$BIN/patchsync-sample" generate --build 1 --out "$WORK/build" --scale "$SCALE"
"$BIN/patchsync-sample" bundles --out "$WORK/bundles.json"
"$P" keygen --out "$WORK/keys" >/dev/null
K=(--targets-key "$WORK/keys/targets.key" --online-key "$WORK/keys/online.key")
"$P" repo init --origin "$WORK/origin" --root-key "$WORK/keys/root.key" "${K[@]}" >/dev/null
"$P" publish "$WORK/build" --origin "$WORK/origin" --bundles "$WORK/bundles.json" --build-id 1 "${K[@]}" >/dev/null
"$BIN/patchsync-sample" serve --root "$WORK/origin" --url-file "$WORK/url" &
SERVE_PID=$!
for _ in $(seq 100); do [ -s "$WORK/url" ] && break; sleep 0.1; done
URL=$(cat "$WORK/url")
ROOT="$WORK/origin/metadata/root.json"

received() { python3 -c 'import json,sys; print(json.loads(sys.stdin.read().strip().splitlines()[-1])["bytesReceived"])'; }

"$P" init --install "$WORK/required" --remote "$URL" --root "$ROOT" --required-only >/dev/null
required=$("$P" sync --install "$WORK/required" --json | received)
"$P" init --install "$WORK/full" --remote "$URL" --root "$ROOT" >/dev/null
full=$("$P" sync --install "$WORK/full" --json | received)

# curl at the same cap: every object file, one after another on one connection.
(cd "$WORK/origin" && find objects -type f ! -name '*.tmp-*' | sed "s|^|url = $URL/|") > "$WORK/curl.cfg"
start=$(date +%s.%N)
curl -s --limit-rate "$RATE" -K "$WORK/curl.cfg" -o /dev/null
curl_seconds=$(python3 -c "import sys; print(float(sys.argv[2]) - float(sys.argv[1]))" "$start" "$(date +%s.%N)")
curl_bytes=$(cd "$WORK/origin" && find objects -type f ! -name '*.tmp-*' -printf '%s\n' | python3 -c 'import sys; print(sum(map(int, sys.stdin)))')

# Time to playable: the first `bundles` event that says so; time to complete: the sync's end.
"$P" init --install "$WORK/capped" --remote "$URL" --root "$ROOT" >/dev/null
python3 - "$P" "$WORK/capped" "$RATE" "$required" "$full" "$curl_seconds" "$curl_bytes" <<'PY'
import json, subprocess, sys, time
patchsync, install, rate, required, full = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
curl_seconds, curl_bytes = float(sys.argv[6]), int(sys.argv[7])
start = time.monotonic()
sync = subprocess.Popen([patchsync, "sync", "--install", install, "--max-rate", rate, "--json"], stdout=subprocess.PIPE, text=True)
playable = None
steps = []
for line in sync.stdout:
    event = json.loads(line)
    if event.get("event") == "bundles":
        now = time.monotonic() - start
        steps.append((now, [b["name"] for b in event["bundles"]["bundles"] if b["state"] in ("ready", "live")]))
        if playable is None and event["bundles"]["playable"]:
            playable = now
sync.wait()
complete = time.monotonic() - start
assert sync.returncode == 0, sync.returncode
mib = lambda n: f"{n / 1048576:.1f} MiB"
print(f"| install | downloaded |")
print(f"| --- | --- |")
print(f"| required bundles only (base, textures) | {mib(required)} ({required / full:.2f}x of full) |")
print(f"| every bundle | {mib(full)} |")
print()
print(f"through sync --max-rate {rate}:")
print(f"| milestone | seconds | of complete | of curl |")
print(f"| --- | --- | --- | --- |")
for t, names in steps:
    print(f"| ready: {', '.join(names)} | {t:.1f} | {t / complete:.2f}x | {t / curl_seconds:.2f}x |")
print(f"| playable (required part ready) | {playable:.1f} | {playable / complete:.2f}x | {playable / curl_seconds:.2f}x |")
print(f"| complete (sync done) | {complete:.1f} | 1.00x | {complete / curl_seconds:.2f}x |")
print(f"| curl, every object ({mib(curl_bytes)}) | {curl_seconds:.1f} | | 1.00x |")
PY
