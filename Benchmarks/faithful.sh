#!/usr/bin/env bash
# A faithful tree on real game data: Debian's Wesnoth 1.18.8 data (29 absolute symbolic links into other
# packages' fonts) and SuperTuxKart 1.4's (7 relative links that climb out to the fonts, and the empty
# folder data/editor/maps), extracted as the packages hold them. publish refuses each by default (the
# first escaping link names its path); with --dereference-external it copies the fonts, and a player's
# install equals the build folder as the game sees it (diff -r, empty folders included) and verify --full
# is clean.
#
#   sudo bash Benchmarks/faithful.sh      (installs the font packages the links point to)
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
BIN=$HERE/../.build/release
[ -x "$BIN/patchsync" ] || { echo "faithful.sh: run make release first" >&2; exit 1; }
CACHE=${PATCHSYNC_BENCH_CACHE:-$HOME/.cache/patchsync-bench}
# NAME PAIR DEB DATA-FOLDER FONT-PACKAGES (what the build's links point to)
DATASETS="
wesnoth-1.18.8|wesnoth|wesnoth-1.18-data_1.18.8-1_all.deb|usr/share/games/wesnoth/1.18|fonts-dejavu-core fonts-droid-fallback fonts-lato fonts-adf-oldania fonts-lohit-beng-bengali
stk-1.4|supertuxkart|supertuxkart-data_1.4+dfsg-2_all.deb|usr/share/games/supertuxkart|fonts-noto-core fonts-noto-color-emoji fonts-cantarell
"
WORK=$(mktemp -d /tmp/patchsync-faithful.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
P="$BIN/patchsync"
"$P" keygen --out "$WORK/keys" >/dev/null
K=(--targets-key "$WORK/keys/targets.key" --online-key "$WORK/keys/online.key")

check() {
  local name=$1 pair=$2 deb=$3 data=$4 fonts=$5
  echo "== $name"
  bash "$HERE/datasets.sh" "$pair" >/dev/null   # fetches and checks the pinned .deb
  local missing=""; for p in $fonts; do dpkg -s "$p" >/dev/null 2>&1 || missing="$missing $p"; done
  [ -z "$missing" ] || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $missing >/dev/null; }
  local w="$WORK/$name"
  mkdir -p "$w/deb/usr/share"
  ln -s /usr/share/fonts "$w/deb/usr/share/fonts"   # relative links to ../fonts reach the installed fonts
  dpkg-deb -x "$CACHE/debs/$deb" "$w/deb"
  local build="$w/deb/$data"
  "$P" repo init --origin "$w/origin" --root-key "$WORK/keys/root.key" "${K[@]}" >/dev/null
  echo "build: $(find "$build" -type f | wc -l) files, $(find "$build" -type l | wc -l) symbolic links," \
       "$(find "$build" -type d -empty | wc -l) empty folders ($(find "$build" -type d -empty -printf '%P ' | head -c 200))"
  set +e
  "$P" publish "$build" --origin "$w/origin" --build-id "$name" "${K[@]}" 2>&1 | tail -2
  local status=${PIPESTATUS[0]}
  set -e
  echo "publish without --dereference-external: exit $status"
  [ "$status" = 64 ] || { echo "faithful.sh: expected exit 64" >&2; exit 1; }
  if ! "$P" publish "$build" --origin "$w/origin" --build-id "$name" --dereference-external "${K[@]}" >/dev/null 2>"$w/err"; then
    # A link to a font this Debian release does not ship: refused by name, as a publisher would see it.
    head -1 "$w/err"
    echo "removing links to nothing: $(find "$build" -xtype l -printf '%P ' -delete)"
    "$P" publish "$build" --origin "$w/origin" --build-id "$name" --dereference-external "${K[@]}" 2>/dev/null
  fi
  "$P" init --install "$w/game" --remote "file://$w/origin" --root "$w/origin/metadata/root.json" >/dev/null
  "$P" sync --install "$w/game" --quiet >/dev/null
  "$P" apply --install "$w/game" >/dev/null
  diff -r "$build/" "$w/game/current/" && echo "diff -r build install: identical (the fonts copied, empty folders kept)"
  "$P" verify --full --install "$w/game"
}

while IFS='|' read -r name pair deb data fonts; do
  [ -n "$name" ] || continue
  check "$name" "$pair" "$deb" "$data" "$fonts"
done <<< "$DATASETS"
