#!/usr/bin/env bash
# Patch size on real game data (issue 9): one pair of releases from Benchmarks/datasets.sh, patched
# by PatchSync through nginx on loopback (bytes and requests from nginx's access log), with and
# without publisher-side deltas, side by side with rsync, zsync, casync, xdelta3 and the full
# download compressed, in the same run. Prints one table: bytes, ratio to rsync, ratio to xdelta3,
# requests, and wall time.
#
#   sudo bash Benchmarks/patch.sh [supertuxkart|wesnoth] [CHUNK_KIB]
#
# CHUNK_KIB sets PatchSync's average chunk size (default: the product default, 256); with
# PATCH_ONLY_PATCHSYNC=1 only the PatchSync rows run (the chunk-size study, Benchmarks/chunks.sh).
# Installs what is missing (nginx rsync zsync casync xdelta3 pigz bc). Needs about 6 GB in /tmp
# for SuperTuxKart.
set -euo pipefail
cd "$(dirname "$0")/.."
PAIR=${1:-wesnoth}
CHUNK=${2:-}
ONLY=${PATCH_ONLY_PATCHSYNC:-0}
. Benchmarks/lib.sh

need_tools nginx rsync zsync casync xdelta3 pigz bc curl
pair_builds "$PAIR"
WORK=$(mktemp -d /tmp/patchsync-patch.XXXXXX)
NGINX_PID=""; RSYNC_PID=""
trap '[ -n "$NGINX_PID" ] && kill $NGINX_PID 2>/dev/null; [ -n "$RSYNC_PID" ] && kill $RSYNC_PID 2>/dev/null; wait 2>/dev/null; rm -rf "$WORK"' EXIT
now() { date +%s.%N; }
secs() { echo "scale=1; ($2 - $1) / 1" | bc; }
ROWS="$WORK/rows"; : > "$ROWS"
row() { echo "$1|$2|$3|$4" >> "$ROWS"; }   # what | bytes | requests | seconds

# --- PatchSync: publish OLD, install it through nginx, publish NEW, sync; with and without deltas ---
mkdir -p "$WORK/www"
NGINX_ACCESS_LOG="$WORK/access.log" start_nginx
URL="http://127.0.0.1:$PORT"
"$BIN/patchsync" keygen --out "$WORK/keys" >/dev/null
chunk_args=(); [ -n "$CHUNK" ] && chunk_args=(--chunk-size "$CHUNK")
[ -n "${CODEC:-}" ] && chunk_args+=(--codec "$CODEC")  # CODEC=deflate, zstd:9, …: the objects' codec
export NGINX_ACCESS_LOG="$WORK/access.log"
for variant in deltas chunks; do
  origin="$WORK/www/$variant"
  "$BIN/patchsync" repo init --origin "$origin" --root-key "$WORK/keys/root.key" --targets-key "$WORK/keys/targets.key" --online-key "$WORK/keys/online.key" >/dev/null
done
publish_old=$(ps_publish "$WORK/www/deltas" "$OLD" "$OLD_NAME" 0 "${chunk_args[@]}")
rm -rf "$WORK/www/chunks" && cp -a "$WORK/www/deltas" "$WORK/www/chunks"
"$BIN/patchsync" init --install "$WORK/install-deltas" --remote "$URL/deltas" --root "$WORK/www/deltas/metadata/root.json" >/dev/null
"$BIN/patchsync" sync --install "$WORK/install-deltas" >/dev/null 2>&1
"$BIN/patchsync" apply --install "$WORK/install-deltas" >/dev/null
full_bytes=$(served_since 0 /deltas/objects/ | cut -d' ' -f1)
cp -a "$WORK/install-deltas" "$WORK/install-chunks"
sed -i "s|$URL/deltas|$URL/chunks|" "$WORK/install-chunks/.patchsync/config.json"
for variant in deltas chunks; do
  sources=2; [ $variant = chunks ] && sources=0
  if [ $variant = deltas ]; then  # what diff predicts before NEW is published: the CI budget gate's figure
    "$BIN/patchsync" diff "file://$WORK/www/deltas#$OLD_NAME" "$NEW" --root "$WORK/www/deltas/metadata/root.json" \
      --json > "$WORK/diff.json" 2>/dev/null || true
  fi
  seconds_publish=$(ps_publish "$WORK/www/$variant" "$NEW" "$NEW_NAME" $sources "${chunk_args[@]}")
  offset=$(stat -c %s "$WORK/access.log")
  t0=$(now)
  "$BIN/patchsync" sync --install "$WORK/install-$variant" --json > "$WORK/sync-$variant.json" 2>/dev/null
  t1=$(now)
  read -r bytes requests <<<"$(served_since "$offset" "/$variant/")"
  label="PatchSync, chunks + deltas"; [ $variant = chunks ] && label="PatchSync, chunks only"
  row "$label${CHUNK:+ ($CHUNK KiB)}" "$bytes" "$requests" "$(secs "$t0" "$t1")"
  echo "$variant: publish of $NEW_NAME took $seconds_publish s (of $OLD_NAME: $publish_old s)" >&2
  manifest=$(find "$WORK/www/$variant/targets" -name "*.$NEW_NAME.json.gz" -printf '%s\n')
  [ -n "${PATCH_SUMMARY:-}" ] && echo "$PAIR ${CHUNK:-256} $variant $bytes $requests $manifest $seconds_publish" >> "$PATCH_SUMMARY"
  "$BIN/patchsync" apply --install "$WORK/install-$variant" >/dev/null
  diff -r "$WORK/install-$variant/current" "$NEW" >/dev/null || { echo "patch.sh: $variant install differs from $NEW_NAME" >&2; exit 1; }
done
manifest_bytes=$(tail -n1 "$WORK/sync-deltas.json" | python3 -c 'import json,sys; r=json.load(sys.stdin); print(r.get("filesPatched", 0), r.get("deltaBytes", 0))')
echo "deltas: files patched, pack bytes: $manifest_bytes" >&2
python3 - "$WORK/diff.json" "$WORK/sync-deltas.json" <<'PY' >&2
import json, sys
diff = json.load(open(sys.argv[1]))
predicted, everything = diff["total"]["downloadBytes"], diff["total"]["downloadBytes"] + diff.get("metadataBytes", 0)
sync = json.loads(open(sys.argv[2]).read().strip().splitlines()[-1])
content, received = sync["deltaBytes"] + sync["bytesPlanned"], sync["bytesReceived"]
print(f"diff predicted {predicted:,} B of delta pack and chunks before the publish, the sync fetched {content:,} B "
      f"({predicted / content:.4f}x); with the manifest delta and signed metadata {everything:,} B predicted, "
      f"{received:,} B received ({everything / received:.4f}x)")
PY

if [ "$ONLY" != 1 ]; then
  # --- rsync: a daemon on loopback, the client holding a copy of OLD ---
  cat > "$WORK/rsyncd.conf" <<CONF
use chroot = no
[new]
path = $NEW
read only = yes
CONF
  RPORT=$(python3 -c "import socket; s=socket.socket(); s.bind(('',0)); print(s.getsockname()[1])")
  rsync --daemon --no-detach --config="$WORK/rsyncd.conf" --port="$RPORT" --address=127.0.0.1 & RSYNC_PID=$!
  sleep 0.5
  cp -a "$OLD" "$WORK/rsync-dest"
  t0=$(now)
  rsync -a -c --no-whole-file -z --delete --stats "rsync://127.0.0.1:$RPORT/new/" "$WORK/rsync-dest/" > "$WORK/rsync.log"
  t1=$(now)
  bytes=$(awk -F': ' '/^Total bytes received/ { gsub(/,/, "", $2); print $2 }' "$WORK/rsync.log")
  row "rsync -a -c --no-whole-file -z" "$bytes" 1 "$(secs "$t0" "$t1")"
  rm -rf "$WORK/rsync-dest"

  # --- deterministic tars of the two trees, for zsync and xdelta3 ---
  tarball() { tar --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner -C "$1" -cf "$2" .; }
  tarball "$OLD" "$WORK/old.tar"; tarball "$NEW" "$WORK/new.tar"

  # --- zsync: the new tar and its .zsync on nginx, the old tar as the seed ---
  mkdir -p "$WORK/www/zsync"; ln "$WORK/new.tar" "$WORK/www/zsync/new.tar"
  (cd "$WORK/www/zsync" && zsyncmake -u "$URL/zsync/new.tar" -o new.tar.zsync new.tar >/dev/null 2>&1)
  offset=$(stat -c %s "$WORK/access.log")
  t0=$(now)
  (cd "$WORK" && zsync -q -i old.tar -o zsync-out.tar "$URL/zsync/new.tar.zsync" >/dev/null 2>&1)
  t1=$(now)
  cmp -s "$WORK/zsync-out.tar" "$WORK/new.tar" || { echo "patch.sh: zsync did not rebuild new.tar" >&2; exit 1; }
  read -r bytes requests <<<"$(served_since "$offset" /zsync/)"
  row "zsync (tar, over HTTP)" "$bytes" "$requests" "$(secs "$t0" "$t1")"
  rm -f "$WORK/zsync-out.tar"

  # --- casync: new compressed chunk bytes in a store that holds OLD ---
  for size in 16K 64K; do
    store="$WORK/casync-$size"
    casync make --chunk-size="$size" --store="$store" "$WORK/old.caidx" "$OLD" >/dev/null
    find "$store" -type f -name '*.cacnk' | sort > "$WORK/before"
    t0=$(now)
    casync make --chunk-size="$size" --store="$store" "$WORK/new.caidx" "$NEW" >/dev/null
    t1=$(now)
    find "$store" -type f -name '*.cacnk' | sort > "$WORK/after"
    newchunks=$(comm -13 "$WORK/before" "$WORK/after")
    bytes=$(echo "$newchunks" | xargs -r stat -c %s | awk '{ s += $1 } END { printf "%.0f\n", s }')
    row "casync make, $size chunks (new chunks)" "$bytes" "$(echo "$newchunks" | grep -c . || true)" "$(secs "$t0" "$t1")"
    rm -rf "$store"
  done

  # --- xdelta3 on the tars, and the full download compressed ---
  t0=$(now)
  xdelta3 -e -9 -f -B $(( 1 << 30 )) -W $(( 1 << 23 )) -s "$WORK/old.tar" "$WORK/new.tar" "$WORK/patch.vcdiff"
  t1=$(now)
  XDELTA=$(stat -c %s "$WORK/patch.vcdiff")
  row "xdelta3 -e -9 (tars)" "$XDELTA" 1 "$(secs "$t0" "$t1")"
  t0=$(now); full=$(pigz -6 -c "$WORK/new.tar" | wc -c); t1=$(now)
  row "full download (tar, gzip -6)" "$full" 1 "$(secs "$t0" "$t1")"
fi

echo
echo "$OLD_NAME → $NEW_NAME ($(du -sm "$NEW" | cut -f1) MiB, $(find "$NEW" -type f | wc -l) files); PatchSync's fresh install of $OLD_NAME fetched $full_bytes object bytes"
RSYNC=$(awk -F'|' '/^rsync/ { print $2 }' "$ROWS"); XD=${XDELTA:-}
printf '%-44s %14s %9s %10s %9s %9s\n' "what" "bytes" "÷ rsync" "÷ xdelta3" "requests" "seconds"
while IFS='|' read -r what bytes requests seconds; do
  r1="-"; r2="-"
  [ -n "$RSYNC" ] && r1=$(echo "scale=2; $bytes / $RSYNC" | bc)
  [ -n "$XD" ] && r2=$(echo "scale=2; $bytes / $XD" | bc)
  printf '%-44s %14s %9s %10s %9s %9s\n' "$what" "$bytes" "$r1" "$r2" "$requests" "$seconds"
done < "$ROWS"
