#!/usr/bin/env bash
# What an origin stores for a release history, side by side in one run: a seeded history of RELEASES
# releases of a generated game (Benchmarks/generate-build.py: PAKS paks of PAK_MIB MiB and FILES small
# files; each release changes PERCENT% of every pak's bytes, 4 KiB inserted in each, and PERCENT% of the
# small files), published one after another into one origin. Per release:
#   - origin growth with today's store (new objects are whole new or changed files; delta packs and
#     metadata included: what an upload sends), and the new file objects publish reports written;
#   - what a store of each chunk once would grow by (`patchsync-bench store-limit`: the chunks no
#     earlier release had, each compressed alone as publish stores a chunk);
#   - `casync make` of the same tree into one shared chunk store: how much that store grew;
#   - what a player on the previous release downloads (`publish --dry-run`: chunks, before deltas).
# Then the ratios the store targets speak of: storage over (first build + Σ changes), with Σ changes
# taken as the chunk-once growth.
#
# Then a fresh install of the last release from that origin (over nginx on loopback), against the same
# build published alone into an empty origin: time (median of RUNS alternating runs) and range requests.
# RANGE_KIB is publish's --range-size (the fragmentation bound; default: publish's own); GAP_KIB the
# installs' coalesceGapBytes (neighbouring ranges up to that far apart are read as one; default 0);
# DELTA_SOURCES publish's --delta-sources (how many earlier builds get a delta pack; default publish's 2).
# Last, where the last release's ranges come from (Benchmarks/ranges.py): ranges by coalescing gap, and
# the objects they sit in (the requests if one request carried all of an object's ranges).
#
#   bash Benchmarks/store.sh                              (RELEASES=10 PAKS=4 PAK_MIB=64 FILES=2000 PERCENT=3)
#   PATCHSYNC_BIN_DIR=.build/debug bash Benchmarks/store.sh   (bytes only: a debug build measures the same)
set -euo pipefail
cd "$(dirname "$0")/.."
source Benchmarks/lib.sh
RELEASES=${RELEASES:-10} PAKS=${PAKS:-4} PAK_MIB=${PAK_MIB:-64} FILES=${FILES:-2000} PERCENT=${PERCENT:-3}
RUNS=${RUNS:-3} RANGE_KIB=${RANGE_KIB:-} GAP_KIB=${GAP_KIB:-0} DELTA_SOURCES=${DELTA_SOURCES:-}
need_tools casync python3 bc nginx curl
BIN=${PATCHSYNC_BIN_DIR:-$(pwd)/.build/release}
[ -x "$BIN/patchsync" ] || make release >/dev/null
[ -x "$BIN/patchsync-bench" ] || swift build -c "$(basename "$BIN")" --product patchsync-bench >/dev/null
WORK=$(mktemp -d /tmp/patchsync-store.XXXXXX)
trap 'kill "${NGINX_PID:-}" 2>/dev/null; chmod -R u+w "$WORK" 2>/dev/null; rm -rf "$WORK"' EXIT
range=(); [ -n "$RANGE_KIB" ] && range=(--range-size "$RANGE_KIB")
[ -n "$DELTA_SOURCES" ] && range+=(--delta-sources "$DELTA_SOURCES")
"$BIN/patchsync" keygen --out "$WORK/keys" >/dev/null
"$BIN/patchsync" repo init --origin "$WORK/origin" --root-key "$WORK/keys/root.key" \
  --targets-key "$WORK/keys/targets.key" --online-key "$WORK/keys/online.key" >/dev/null
# The bytes of the files under a folder (not its folders: a casync store has up to 65,536).
size() { find "$1" -type f -printf '%s\n' 2>/dev/null | awk '{ s += $1 } END { printf "%.0f\n", s }'; }

echo "store.sh: generating $RELEASES releases ($PAKS paks of $PAK_MIB MiB, $FILES files, $PERCENT% changed each)" >&2
python3 Benchmarks/generate-build.py "$WORK/build-1" "$FILES" --seed 11 --paks "$PAKS" --pak-mib "$PAK_MIB"
for r in $(seq 2 "$RELEASES"); do
  python3 Benchmarks/generate-build.py "$WORK/build-$r" "$FILES" --seed "$((11 + r))" --mutate "$PERCENT" \
    --from "$WORK/build-$((r - 1))" >/dev/null
done
trees=(); for r in $(seq 1 "$RELEASES"); do trees+=("$WORK/build-$r"); done
mapfile -t ideal < <("$BIN/patchsync-bench" store-limit 2 "${trees[@]}")
[ "${#ideal[@]}" = "$RELEASES" ] || { echo "store.sh: patchsync-bench store-limit failed" >&2; exit 1; }

json() { python3 -c "import json,sys; d=json.loads(sys.stdin.read().strip().splitlines()[-1]); print($1)"; }
printf '%-8s %12s %14s %14s %12s %14s %14s %14s\n' release "build bytes" "origin grew" "new objects" "delta packs" \
  "chunk-once" "casync grew" "player fetch"
consolidated=0 sum_deltas=0 origin_before=$(size "$WORK/origin") casync_before=0 sum_origin=0 sum_written=0 sum_ideal=0 sum_casync=0 sum_fetch=0
for r in $(seq 1 "$RELEASES"); do
  build=$WORK/build-$r
  fetch=0
  if [ "$r" -gt 1 ]; then
    fetch=$("$BIN/patchsync" publish "$build" --origin "$WORK/origin" --build-id "$r" --dry-run --json \
      --targets-key "$WORK/keys/targets.key" --online-key "$WORK/keys/online.key" |
      tail -1 | json 'd["patch"]["total"]["downloadBytes"]')
  fi
  report=$("$BIN/patchsync" publish "$build" --origin "$WORK/origin" --build-id "$r" --json "${range[@]}" \
    --targets-key "$WORK/keys/targets.key" --online-key "$WORK/keys/online.key" | tail -1)
  written=$(echo "$report" | json 'd["objectBytesWritten"]')
  consolidated=$((consolidated + $(echo "$report" | json 'len(d["consolidatedFiles"])')))
  deltas=$(echo "$report" | json 'sum(x["bytes"] for x in d["deltas"])')
  origin_now=$(size "$WORK/origin"); grew=$((origin_now - origin_before)); origin_before=$origin_now
  casync make --store="$WORK/casync.castr" "$WORK/release-$r.caidx" "$build" >/dev/null
  casync_now=$(size "$WORK/casync.castr"); casync_grew=$((casync_now - casync_before)); casync_before=$casync_now
  once=$(echo "${ideal[$((r - 1))]}" | json 'd["newStoredBytes"]')
  printf '%-8s %12s %14s %14s %12s %14s %14s %14s\n' "$r" "$(size "$build")" "$grew" "$written" "$deltas" "$once" \
    "$casync_grew" "$fetch"
  [ "$r" = 1 ] && first_origin=$grew first_written=$written first_ideal=$once first_casync=$casync_grew
  sum_origin=$((sum_origin + grew)) sum_written=$((sum_written + written)) sum_ideal=$((sum_ideal + once))
  sum_casync=$((sum_casync + casync_grew)) sum_fetch=$((sum_fetch + fetch)) sum_deltas=$((sum_deltas + deltas))
done
printf '%-8s %12s %14s %14s %12s %14s %14s %14s\n' total "" "$sum_origin" "$sum_written" "$sum_deltas" "$sum_ideal" \
  "$sum_casync" "$sum_fetch"
ratio() { echo "scale=2; $1 / $2" | bc; }
echo "storage / (first build + Σ changes as chunks once): $(ratio "$sum_origin" "$sum_ideal")× (target ≤ 1.2×)"
echo "storage without the delta packs / (first build + Σ changes): $(ratio "$((sum_origin - sum_deltas))" "$sum_ideal")×"
echo "new objects / chunk-once: $(ratio "$sum_written" "$sum_ideal")×; origin growth / (new objects + delta packs," \
  "the rest being metadata): $(ratio "$sum_origin" "$((sum_written + sum_deltas))")× (target ≤ 1.1×)"
echo "casync's chunk store / chunk-once: $(ratio "$sum_casync" "$sum_ideal")× (releases 2..$RELEASES:" \
  "$(ratio "$((sum_casync - first_casync))" "$((sum_ideal - first_ideal))")×; casync's chunks average 64 KiB, ours 256 KiB)"
if [ "$RELEASES" -gt 1 ]; then
  echo "releases 2..$RELEASES: the origin (what an upload sends) grew $((sum_origin - first_origin)) B, against" \
    "$((sum_ideal - first_ideal)) B of new chunks and $sum_fetch B that players on the previous release fetched:" \
    "$(ratio "$((sum_origin - first_origin))" "$sum_fetch")× the patch (target ≤ 1.1×); chunk-once" \
    "$(ratio "$((sum_ideal - first_ideal))" "$sum_fetch")×"
fi
echo "files stored whole again (the fragmentation bound${RANGE_KIB:+, --range-size $RANGE_KIB}): $consolidated over $RELEASES releases"

# A fresh install of the last release: from the history's origin, and from the build published alone.
"$BIN/patchsync" repo init --origin "$WORK/alone" --root-key "$WORK/keys/root.key" \
  --targets-key "$WORK/keys/targets.key" --online-key "$WORK/keys/online.key" >/dev/null
"$BIN/patchsync" publish "$WORK/build-$RELEASES" --origin "$WORK/alone" --build-id "$RELEASES" \
  --targets-key "$WORK/keys/targets.key" --online-key "$WORK/keys/online.key" >/dev/null
mkdir -p "$WORK/www"; ln -s "$WORK/origin" "$WORK/www/history"; ln -s "$WORK/alone" "$WORK/www/alone"
start_nginx
install() {  # install SIDE: prints "seconds requests bytes"
  rm -rf "$WORK/install"
  "$BIN/patchsync" init --install "$WORK/install" --remote "http://127.0.0.1:$PORT/$1" \
    --root "$WORK/origin/metadata/1.root.json" >/dev/null
  "$BIN/patchsync" config set coalesceGapBytes "$((GAP_KIB * 1024))" --install "$WORK/install" >/dev/null
  local start end out
  start=$(date +%s.%N)
  out=$("$BIN/patchsync" sync --install "$WORK/install" --json | tail -1)
  "$BIN/patchsync" apply --install "$WORK/install" >/dev/null
  end=$(date +%s.%N)
  echo "$(echo "$end - $start" | bc) $(echo "$out" | json 'd["requests"]') $(echo "$out" | json 'd["bytesReceived"]')"
}
declare -A times requests bytes
for run in $(seq 1 "$RUNS"); do
  for side in history alone; do
    read -r t q b < <(install "$side")
    times[$side]+="$t " requests[$side]=$q bytes[$side]=$b
    echo "fresh install of release $RELEASES from the $side origin, run $run: $t s, $q requests, $b B" >&2
  done
done
median() { tr ' ' '\n' <<<"$1" | grep . | sort -g | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }'; }
th=$(median "${times[history]}") ta=$(median "${times[alone]}")
echo "fresh install of release $RELEASES: from the history's origin $th s, ${requests[history]} requests," \
  "${bytes[history]} B; published alone $ta s, ${requests[alone]} requests, ${bytes[alone]} B:" \
  "time $(ratio "$th" "$ta")× (target ≤ 1.1×), requests $(ratio "${requests[history]}" "${requests[alone]}")× (target ≤ 1.5×)"
echo "where release $RELEASES's ranges come from (Benchmarks/ranges.py):"
"$BIN/patchsync" manifest show "file://$WORK/origin#$RELEASES" --root "$WORK/origin/metadata/1.root.json" --decoded |
  python3 Benchmarks/ranges.py
