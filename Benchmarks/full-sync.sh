#!/usr/bin/env bash
# A fresh install of the sample game (about 100 MB) over loopback nginx: PatchSync's sync
# (range requests, inflate, SHA-256 per chunk, pwrite, state records, staging) side by side
# with curl downloading the same objects whole (no verification, no writes but to disk),
# in the same run. Prints seconds and the ratio PatchSync / curl.
#
#   bash Benchmarks/full-sync.sh [SCALE]     (SCALE 1.0 = about 100 MB; needs `make release`)
set -euo pipefail
cd "$(dirname "$0")/.."
SCALE=${1:-1.0}
BIN=$(pwd)/.build/release
[ -x "$BIN/patchsync" ] && [ -x "$BIN/patchsync-sample" ] || make release >/dev/null
command -v curl >/dev/null || { echo "curl is needed: apt-get install curl" >&2; exit 1; }
WORK=$(mktemp -d /tmp/patchsync-bench.XXXXXX)
SERVE=""
trap '[ -n "$SERVE" ] && kill $SERVE 2>/dev/null; wait 2>/dev/null; rm -rf "$WORK"' EXIT
now() { date +%s.%N; }

"$BIN/patchsync-sample" generate --build 1 --out "$WORK/build" --scale "$SCALE"
"$BIN/patchsync" keygen --out "$WORK/keys" >/dev/null
"$BIN/patchsync" repo init --origin "$WORK/origin" --root-key "$WORK/keys/root.key" --targets-key "$WORK/keys/targets.key" --online-key "$WORK/keys/online.key" >/dev/null
t0=$(now); "$BIN/patchsync" publish "$WORK/build" --origin "$WORK/origin" --build-id 1 --targets-key "$WORK/keys/targets.key" --online-key "$WORK/keys/online.key" >/dev/null; t1=$(now)
publish=$(echo "$t1 - $t0" | bc)
"$BIN/patchsync-sample" serve --root "$WORK/origin" --url-file "$WORK/url" & SERVE=$!
for _ in $(seq 100); do [ -s "$WORK/url" ] && break; sleep 0.1; done
URL=$(cat "$WORK/url")

(cd "$WORK/origin" && find objects -type f ! -path '*/.incoming/*') | sed "s|^|$URL/|" > "$WORK/urls"
bytes=$(cd "$WORK/origin" && find objects -type f ! -path '*/.incoming/*' -printf '%s\n' | awk '{s+=$1} END { printf "%.0f\n", s }')
mkdir -p "$WORK/curl"
t0=$(now)
(cd "$WORK/curl" && xargs -a "$WORK/urls" curl -s --no-progress-meter --parallel --parallel-max 6 --remote-name-all)
t1=$(now); curl_s=$(echo "$t1 - $t0" | bc)

"$BIN/patchsync" init --install "$WORK/game" --remote "$URL" --root "$WORK/origin/metadata/root.json" >/dev/null
t0=$(now); "$BIN/patchsync" sync --install "$WORK/game" 2>/dev/null >/dev/null; t1=$(now)
sync_s=$(echo "$t1 - $t0" | bc)

printf '%-44s %10s %10s\n' "what" "seconds" "MiB/s"
rate() { echo "scale=1; $bytes / 1048576 / $1" | bc; }
printf '%-44s %10.2f %10s\n' "publish (chunk, deflate, sign)" "$publish" "-"
printf '%-44s %10.2f %10s\n' "curl, whole objects, 6 parallel" "$curl_s" "$(rate "$curl_s")"
printf '%-44s %10.2f %10s\n' "patchsync sync (verify, stage)" "$sync_s" "$(rate "$sync_s")"
printf 'objects: %s bytes; ratio patchsync/curl: %.2f\n' "$bytes" "$(echo "$sync_s / $curl_s" | bc -l)"
