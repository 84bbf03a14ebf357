#!/usr/bin/env bash
# What a second publish stores and an upload sends: OLD is published into an empty origin, then NEW;
# the origin's growth is split into the new chunks' objects, the delta packs and metadata, beside what
# a player on OLD downloads (chunks only: a delta pack lowers it) and what `casync make` adds to a store
# that holds OLD.
#
#   bash Benchmarks/store-pair.sh big            a PAK_MIB MiB file (default 600), 1 MiB changed in its middle
#   bash Benchmarks/store-pair.sh supertuxkart   a pair of Benchmarks/datasets.sh (or wesnoth)
#   PUBLISH_ARGS="--small-file 0" bash Benchmarks/store-pair.sh supertuxkart   (more publish options)
set -euo pipefail
cd "$(dirname "$0")/.."
source Benchmarks/lib.sh
PAIR=${1:-big} PAK_MIB=${PAK_MIB:-600}
need_tools casync python3 bc
WORK=$(mktemp -d /tmp/patchsync-store-pair.XXXXXX)
trap 'chmod -R u+w "$WORK" 2>/dev/null; rm -rf "$WORK"' EXIT
if [ "$PAIR" = big ]; then
  BIN=${PATCHSYNC_BIN_DIR:-$(pwd)/.build/release}
  [ -x "$BIN/patchsync" ] || make release >/dev/null
  OLD=$WORK/one NEW=$WORK/two OLD_NAME="a $PAK_MIB MiB file" NEW_NAME="1 MiB changed"
  python3 Benchmarks/generate-build.py "$OLD" 0 --seed 5 --paks 1 --pak-mib "$PAK_MIB"
  mkdir -p "$NEW/paks"
  cp "$OLD/paks/pak00.pak" "$NEW/paks/pak00.pak"
  python3 - "$NEW/paks/pak00.pak" <<'PY'
import os, random, sys
with open(sys.argv[1], "r+b") as f:
    f.seek(os.path.getsize(sys.argv[1]) // 2 + 12345)
    f.write(random.Random(9).randbytes(1 << 20))
PY
else
  pair_builds "$PAIR"
fi
size() { find "$1" -type f -printf '%s\n' 2>/dev/null | awk '{ s += $1 } END { printf "%.0f\n", s }'; }
json() { python3 -c "import json,sys; d=json.loads(sys.stdin.read().strip().splitlines()[-1]); print($1)"; }
"$BIN/patchsync" keygen --out "$WORK/keys" >/dev/null
"$BIN/patchsync" repo init --origin "$WORK/origin" --root-key "$WORK/keys/root.key" \
  --targets-key "$WORK/keys/targets.key" --online-key "$WORK/keys/online.key" >/dev/null
publish() {
  "$BIN/patchsync" publish "$1" --origin "$WORK/origin" --build-id "$2" --json "${@:3}" \
    ${PUBLISH_ARGS:-} --targets-key "$WORK/keys/targets.key" --online-key "$WORK/keys/online.key" | tail -1
}
publish "$OLD" 1 >/dev/null
casync make --store="$WORK/casync.castr" "$WORK/old.caidx" "$OLD" >/dev/null
before=$(size "$WORK/origin") casync_before=$(size "$WORK/casync.castr")
fetch=$(publish "$NEW" 2 --dry-run | json 'd["patch"]["total"]["downloadBytes"]')
start=$(date +%s.%N)
report=$(publish "$NEW" 2)
seconds=$(echo "$(date +%s.%N) - $start" | bc)
casync make --store="$WORK/casync.castr" "$WORK/new.caidx" "$NEW" >/dev/null
grew=$(($(size "$WORK/origin") - before)) casync_grew=$(($(size "$WORK/casync.castr") - casync_before))
written=$(echo "$report" | json 'd["objectBytesWritten"]')
deltas=$(echo "$report" | json 'sum(x["bytes"] for x in d["deltas"])')
reused=$(echo "$report" | json 'd["reusedChunkBytes"]')
whole=$(echo "$report" | json 'len(d["consolidatedFiles"])')
mib() { echo "scale=2; $1 / 1048576" | bc; }
ratio() { echo "scale=2; $1 / $2" | bc; }
echo "$OLD_NAME -> $NEW_NAME: the second publish ($seconds s) wrote $(mib "$written") MiB of new chunks," \
  "$(mib "$deltas") MiB of delta packs and $(mib "$((grew - written - deltas))") MiB of metadata; it left" \
  "$(mib "$reused") MiB of changed files' chunks in place and stored $whole files whole again"
echo "the origin grew $(mib "$grew") MiB (what an upload sends): $(ratio "$grew" "$((written + deltas))")× the new" \
  "chunks + delta packs (target ≤ 1.1×); a player on $OLD_NAME downloads $(mib "$fetch") MiB in chunks" \
  "($(ratio "$grew" "$fetch")× that); casync's store grew $(mib "$casync_grew") MiB"
