#!/usr/bin/env bash
# A player two builds behind (issue 9): OLD → MID → NEW, where MID is OLD with half of the release's
# changes (the changed, added and removed paths whose name hashes even). With the default two delta
# sources, NEW carries packs from MID and from OLD. Prints the bytes nginx served for OLD → MID and
# MID → NEW (one player who kept up) and for OLD → NEW (one who did not), and the ratio of the latter to
# the sum of the former. Target: at most 1.1.
#
#   sudo bash Benchmarks/two-behind.sh [wesnoth|supertuxkart]
set -euo pipefail
cd "$(dirname "$0")/.."
PAIR=${1:-wesnoth}
. Benchmarks/lib.sh
need_tools nginx bc curl
pair_builds "$PAIR"
WORK=$(mktemp -d /tmp/patchsync-two.XXXXXX)
NGINX_PID=""
trap '[ -n "$NGINX_PID" ] && kill $NGINX_PID 2>/dev/null; wait 2>/dev/null; rm -rf "$WORK"' EXIT

# MID: OLD with every other change of the release applied.
cp -a "$OLD" "$WORK/mid"
python3 - "$OLD" "$NEW" "$WORK/mid" <<'PY'
import filecmp, hashlib, os, shutil, sys
old, new, mid = sys.argv[1:]
def files(root):
    return {os.path.relpath(os.path.join(d, f), root) for d, _, fs in os.walk(root) for f in fs}
def even(path): return hashlib.sha256(path.encode()).digest()[0] % 2 == 0
o, n = files(old), files(new)
for p in sorted(n):
    if even(p) and (p not in o or not filecmp.cmp(os.path.join(old, p), os.path.join(new, p), shallow=False)):
        os.makedirs(os.path.dirname(os.path.join(mid, p)), exist_ok=True)
        shutil.copy2(os.path.join(new, p), os.path.join(mid, p))
for p in sorted(o - n):
    if even(p): os.remove(os.path.join(mid, p))
PY

mkdir -p "$WORK/www"
export NGINX_ACCESS_LOG="$WORK/access.log"
start_nginx
URL="http://127.0.0.1:$PORT"
"$BIN/patchsync" keygen --out "$WORK/keys" >/dev/null
"$BIN/patchsync" repo init --origin "$WORK/www/o" --root-key "$WORK/keys/root.key" --targets-key "$WORK/keys/targets.key" --online-key "$WORK/keys/online.key" >/dev/null
ps_publish "$WORK/www/o" "$OLD" old 2 >/dev/null
"$BIN/patchsync" init --install "$WORK/kept-up" --remote "$URL/o" --root "$WORK/www/o/metadata/root.json" >/dev/null
"$BIN/patchsync" sync --install "$WORK/kept-up" >/dev/null 2>&1
"$BIN/patchsync" apply --install "$WORK/kept-up" >/dev/null
cp -a "$WORK/kept-up" "$WORK/behind"

step() {  # INSTALL → bytes served for its sync
  local offset bytes requests
  offset=$(stat -c %s "$NGINX_ACCESS_LOG")
  "$BIN/patchsync" sync --install "$1" >/dev/null 2>&1
  "$BIN/patchsync" apply --install "$1" >/dev/null
  read -r bytes requests <<<"$(served_since "$offset" /o/)"
  echo "$bytes"
}
ps_publish "$WORK/www/o" "$WORK/mid" mid 2 >/dev/null
first=$(step "$WORK/kept-up")
ps_publish "$WORK/www/o" "$NEW" new 2 >/dev/null
second=$(step "$WORK/kept-up")
both=$(step "$WORK/behind")
for install in kept-up behind; do
  diff -r "$WORK/$install/current" "$NEW" >/dev/null || { echo "two-behind.sh: $install differs from $NEW_NAME" >&2; exit 1; }
done
sum=$(( first + second ))
echo "$OLD_NAME → half-way → $NEW_NAME"
printf '%-36s %12s\n' "sync" "bytes"
printf '%-36s %12s\n' "OLD → MID" "$first" "MID → NEW" "$second" "sum of the single steps" "$sum" "OLD → NEW (two behind)" "$both"
echo "two behind ÷ sum: $(echo "scale=3; $both / $sum" | bc) (target ≤ 1.1)"
