#!/usr/bin/env bash
# Cost at scale: a generated build of many small files (Benchmarks/generate-build.py, seeded), through
# nginx on loopback, on a fresh ext4 (a loop-mounted image), side by side in one run:
#   - publish (seconds, peak memory), and `casync make` of the same tree when casync is installed;
#   - a fresh install (`sync` then `apply`) beside `curl -s URL/tree.tar.gz | tar -xz` of the same tree;
#   - an up-to-date `sync`, `status`, `bundles` and `verify` (fast) on the installed build;
#   - a patch that changes 1% of the files: publish, then sync (bytes served) and apply.
# Prints seconds and peak resident memory (MiB) for each, and the ratios the targets speak of.
#
#   sudo bash Benchmarks/scale.sh [FILES]      FILES: 200000 (default), 1000000, …
#   FRESH_FS=0 bash Benchmarks/scale.sh 20000  (on /tmp's file system, no root needed)
#   SECOND_PERF=/tmp/second.data sudo -E bash Benchmarks/scale.sh   (a perf profile of the second update's sync)
set -euo pipefail
cd "$(dirname "$0")/.."
source Benchmarks/lib.sh
FILES=${1:-200000}
need_tools nginx curl python3
BIN=${PATCHSYNC_BIN_DIR:-$(pwd)/.build/release}
[ -x "$BIN/patchsync" ] || make release >/dev/null
WORK=$(mktemp -d /tmp/patchsync-scale.XXXXXX)
IMAGE=""
cleanup() {
  set +e
  [ -n "${NGINX_PID:-}" ] && kill "$NGINX_PID" 2>/dev/null; wait 2>/dev/null
  chmod -R u+w "$WORK" 2>/dev/null; mountpoint -q "$WORK" && umount "$WORK"; rm -rf "$WORK" ${IMAGE:+"$IMAGE"}
}
trap cleanup EXIT
if [ "${FRESH_FS:-1}" = 1 ]; then
  [ "$(id -u)" = 0 ] || { echo "run as root (a loop-mounted file system), or with FRESH_FS=0" >&2; exit 77; }
  IMAGE=$(mktemp /var/tmp/patchsync-scale-fs.XXXXXX)
  truncate -s $(( FILES * 4500 * 8 + (2 << 30) )) "$IMAGE"
  mkfs.ext4 -q -F -N $(( FILES * 8 + 100000 )) "$IMAGE"
  mount -o loop "$IMAGE" "$WORK"
fi
mkdir -p "$WORK/www"
export NGINX_ACCESS_LOG=$WORK/access.log

python3 Benchmarks/generate-build.py "$WORK/build-1" "$FILES" --seed 7
changed=$(python3 Benchmarks/generate-build.py "$WORK/build-2" "$FILES" --seed 7 --mutate 1 --from "$WORK/build-1")
python3 Benchmarks/generate-build.py "$WORK/build-3" "$FILES" --seed 8 --mutate 1 --from "$WORK/build-2" >/dev/null
bytes=$(du -sb --apparent-size "$WORK/build-1" | cut -f1)

# measure LABEL COMMAND…: runs it, prints "LABEL seconds peak-MiB"; the command's output is dropped.
ROWS=""
measure() {
  local label=$1 out; shift
  sync; sleep 1
  /usr/bin/time -o "$WORK/time.out" -f '%e %M' "$@" >/dev/null 2>"$WORK/cmd.err" || { cat "$WORK/cmd.err" >&2; echo "scale.sh: $label failed" >&2; exit 1; }
  out=$(tail -1 "$WORK/time.out")
  local row
  row=$(awk -v l="$label" '{ printf "%-34s %9.2f %9.1f\n", l, $1, $2 / 1024 }' <<<"$out")
  ROWS+="$row"$'\n'
  echo "$row"
}
seconds_of() { grep -F "$1" <<<"$ROWS" | head -1 | awk '{ print $(NF-1) }'; }

"$BIN/patchsync" keygen --out "$WORK/keys" >/dev/null
"$BIN/patchsync" repo init --origin "$WORK/www/origin" --root-key "$WORK/keys/root.key" --targets-key "$WORK/keys/targets.key" --online-key "$WORK/keys/online.key" >/dev/null
sign=(--targets-key "$WORK/keys/targets.key" --online-key "$WORK/keys/online.key")
echo "build: $FILES files, $bytes bytes; the patch changes $changed files"
printf '%-34s %9s %9s\n' "what" "seconds" "peak MiB"
measure "publish" "$BIN/patchsync" publish "$WORK/build-1" --origin "$WORK/www/origin" --build-id 1 "${sign[@]}"
if command -v casync >/dev/null; then
  measure "casync make" casync make --store="$WORK/casync.castr" "$WORK/tree.caidx" "$WORK/build-1"
  rm -rf "$WORK/casync.castr" "$WORK/tree.caidx"
fi
tar -C "$WORK/build-1" -cf - . | gzip -6 > "$WORK/www/tree.tar.gz"
start_nginx
URL=http://127.0.0.1:$PORT
mkdir -p "$WORK/tar"
measure "curl | tar -xz" bash -c "curl -s '$URL/tree.tar.gz' | tar -xz -C '$WORK/tar'"
rm -rf "$WORK/tar"
"$BIN/patchsync" init --install "$WORK/game" --remote "$URL/origin" --root "$WORK/www/origin/metadata/root.json" >/dev/null
measure "fresh install: sync" "$BIN/patchsync" sync --install "$WORK/game" --quiet
measure "fresh install: apply" "$BIN/patchsync" apply --install "$WORK/game"
diff -r "$WORK/build-1" "$WORK/game/current" >/dev/null || { echo "scale.sh: the install differs from the build" >&2; exit 1; }
measure "up-to-date sync" "$BIN/patchsync" sync --install "$WORK/game" --quiet
measure "status" "$BIN/patchsync" status --install "$WORK/game"
measure "bundles" "$BIN/patchsync" bundles --install "$WORK/game"
measure "verify (fast)" "$BIN/patchsync" verify --install "$WORK/game"
measure "publish the 1% patch" "$BIN/patchsync" publish "$WORK/build-2" --origin "$WORK/www/origin" --build-id 2 "${sign[@]}"
offset=$(stat -c %s "$NGINX_ACCESS_LOG")
measure "sync the 1% patch" "$BIN/patchsync" sync --install "$WORK/game" --quiet
read -r patch_bytes patch_requests <<<"$(served_since "$offset" /)"
measure "apply the 1% patch" "$BIN/patchsync" apply --install "$WORK/game"
diff -r "$WORK/build-2" "$WORK/game/current" >/dev/null || { echo "scale.sh: the patched install differs from build 2" >&2; exit 1; }
echo "the 1% patch: $patch_bytes bytes in $patch_requests requests"
# The changed files' own transfer: curl | tar -xz of a tarball of only the files the patch changed.
(cd "$WORK/build-2" && { diff -rq "$WORK/build-1" . 2>/dev/null || true; } | sed -n 's|^Files .* and \./\(.*\) differ$|\1|p; s|^Only in \.\(.*\): \(.*\)$|.\1/\2|p' \
  | sed 's|^\./||; s|^/||' > "$WORK/changed.txt")
tar -C "$WORK/build-2" -czf "$WORK/www/changed.tar.gz" -T "$WORK/changed.txt"
mkdir -p "$WORK/changed"
measure "curl | tar -xz (changed files)" bash -c "curl -s '$URL/changed.tar.gz' | tar -xz -C '$WORK/changed'"
echo "the changed files: $(wc -l < "$WORK/changed.txt") files, $(stat -c %s "$WORK/www/changed.tar.gz") bytes as a tar.gz"
# The second update: another 1% patch, with the build before kept for rollback.
measure "publish the second 1% patch" "$BIN/patchsync" publish "$WORK/build-3" --origin "$WORK/www/origin" --build-id 3 "${sign[@]}"
# SECOND_PERF=FILE records a perf profile of this step into FILE (its time then includes perf's cost).
measure "sync the second 1% patch" ${SECOND_PERF:+perf record -F 499 -g -o "$SECOND_PERF"} "$BIN/patchsync" sync --install "$WORK/game" --quiet
measure "apply the second 1% patch" "$BIN/patchsync" apply --install "$WORK/game"
diff -r "$WORK/build-3" "$WORK/game/current" >/dev/null || { echo "scale.sh: the patched install differs from build 3" >&2; exit 1; }
fresh=$(echo "$(seconds_of 'fresh install: sync') + $(seconds_of 'fresh install: apply')" | bc -l)
printf 'ratio fresh install / curl|tar: %.2f (target <= 1.1)\n' "$(echo "$fresh / $(seconds_of 'curl | tar')" | bc -l)"
printf 'ratio 1%% patch sync / fresh install sync: %.3f (a cost in proportion to the change: about 0.01 plus a constant)\n' \
  "$(echo "$(seconds_of 'sync the 1% patch') / $(seconds_of 'fresh install: sync')" | bc -l)"
first=$(echo "$(seconds_of 'sync the 1% patch') + $(seconds_of 'apply the 1% patch')" | bc -l)
second=$(echo "$(seconds_of 'sync the second 1% patch') + $(seconds_of 'apply the second 1% patch')" | bc -l)
own=$(seconds_of 'curl | tar -xz (changed files)')
printf 'ratio first update (sync + apply) / fresh install (sync + apply): %.3f (target <= 0.3); the changed files alone: %.3f\n' \
  "$(echo "$first / $fresh" | bc -l)" "$(echo "$own / $fresh" | bc -l)"
printf 'ratio second update (sync + apply) / fresh install (sync + apply): %.3f (target <= 0.1)\n' "$(echo "$second / $fresh" | bc -l)"
