#!/usr/bin/env bash
# A faithful tree on real game data: Debian's Wesnoth 1.18.8 data, extracted with its 29 symbolic links
# into other packages' fonts. publish refuses it by default (an absolute link names its path); with
# --dereference-external it copies the fonts, and a player's install equals the build folder as the
# game sees it (diff -r through the links) and verify --full is clean.
#
#   sudo bash Benchmarks/faithful.sh      (installs the font packages the links point to)
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
BIN=$HERE/../.build/release
[ -x "$BIN/patchsync" ] || { echo "faithful.sh: run make release first" >&2; exit 1; }
CACHE=${PATCHSYNC_BENCH_CACHE:-$HOME/.cache/patchsync-bench}
bash "$HERE/datasets.sh" wesnoth >/dev/null   # fetches and checks the pinned .deb
DEB=$(ls "$CACHE"/debs/wesnoth-1.18-data_1.18.8-1_all.deb)
FONTS="fonts-dejavu-core fonts-droid-fallback fonts-lato fonts-adf-oldania fonts-lohit-beng-bengali"
missing=""; for p in $FONTS; do dpkg -s "$p" >/dev/null 2>&1 || missing="$missing $p"; done
[ -z "$missing" ] || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $missing >/dev/null; }
WORK=$(mktemp -d /tmp/patchsync-faithful.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
dpkg-deb -x "$DEB" "$WORK/deb"
BUILD="$WORK/deb/usr/share/games/wesnoth/1.18"
P="$BIN/patchsync"
"$P" keygen --out "$WORK/keys" >/dev/null
K=(--targets-key "$WORK/keys/targets.key" --online-key "$WORK/keys/online.key")
"$P" repo init --origin "$WORK/origin" --root-key "$WORK/keys/root.key" "${K[@]}" >/dev/null
echo "build: $(find "$BUILD" -type f | wc -l) files, $(find "$BUILD" -type l | wc -l) symbolic links, $(find "$BUILD" -type d -empty | wc -l) empty folders"
set +e
"$P" publish "$BUILD" --origin "$WORK/origin" --build-id 1.18.8 "${K[@]}" 2>&1 | tail -2
status=${PIPESTATUS[0]}
set -e
echo "publish without --dereference-external: exit $status"
[ "$status" = 64 ] || { echo "faithful.sh: expected exit 64" >&2; exit 1; }
"$P" publish "$BUILD" --origin "$WORK/origin" --build-id 1.18.8 --dereference-external "${K[@]}" 2>/dev/null
"$P" init --install "$WORK/game" --remote "file://$WORK/origin" --root "$WORK/origin/metadata/root.json" >/dev/null
"$P" sync --install "$WORK/game" --quiet >/dev/null
"$P" apply --install "$WORK/game" >/dev/null
diff -r "$BUILD/" "$WORK/game/current/" && echo "diff -r build install: identical (the fonts copied)"
"$P" verify --full --install "$WORK/game"
