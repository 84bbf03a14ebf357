#!/usr/bin/env bash
# Real game data for the patch benchmarks (issue 9): pinned releases of Debian game-data packages,
# fetched with a private APT configuration (its own sources list, lists, cache and status under the
# cache folder: the machine's apt state is not touched), each .deb checked against the SHA-256 pinned
# below, and extracted outside the repository (without the symbolic links to other packages' files).
#
#   bash Benchmarks/datasets.sh [PAIR ...]     PAIR: supertuxkart, wesnoth (default: both)
#
# Prints one line per build: NAME PATH FILES BYTES. The builds land in
# $PATCHSYNC_BENCH_CACHE/builds/NAME (default ~/.cache/patchsync-bench); a build already extracted and
# complete (a .complete marker) is not fetched again. Needs about 3.5 GB free for both pairs.
set -euo pipefail
CACHE=${PATCHSYNC_BENCH_CACHE:-$HOME/.cache/patchsync-bench}
PAIRS=("$@")
[ ${#PAIRS[@]} -gt 0 ] || PAIRS=(supertuxkart wesnoth)

# NAME PACKAGE VERSION SUITE SHA256 DATA-DIRECTORY-IN-THE-PACKAGE
RELEASES="
stk-1.4 supertuxkart-data 1.4+dfsg-2 bookworm 568d69cda50dc8ad1facb89514bd14953dfca736fdb83c49ae330b0aa7dd2364 usr/share/games/supertuxkart
stk-1.5 supertuxkart-data 1.5-2 unstable 1e046209d332a362c6f353626cc065056edcc85d3ab462fe860f0cb96094a2ac usr/share/games/supertuxkart
wesnoth-1.18.5 wesnoth-1.18-data 1:1.18.5-1 trixie 6db473c8af6242d5a9a824f5af79619a0f5769460e896b90f529bacc405aeffd usr/share/games/wesnoth/1.18
wesnoth-1.18.8 wesnoth-1.18-data 1:1.18.8-1 unstable 681f08a817449d4d5b036437e7334f707d909d789d5c7cf63794cdbf531fbd44 usr/share/games/wesnoth/1.18
"
pair_builds() {
  case $1 in
    supertuxkart) echo "stk-1.4 stk-1.5" ;;
    wesnoth) echo "wesnoth-1.18.5 wesnoth-1.18.8" ;;
    *) echo "datasets.sh: unknown pair '$1'; the pairs are supertuxkart and wesnoth" >&2; exit 64 ;;
  esac
}

for tool in apt-get:apt dpkg-deb:dpkg sha256sum:coreutils; do
  command -v "${tool%%:*}" >/dev/null || { echo "datasets.sh needs ${tool%%:*} (Debian package ${tool##*:})" >&2; exit 69; }
done

APT="$CACHE/apt"
apt_private() {
  local suite
  mkdir -p "$APT/lists/partial" "$APT/archives/partial" "$APT/etc"
  [ -f "$APT/status" ] || : > "$APT/status"
  local keyring=/usr/share/keyrings/debian-archive-keyring.gpg
  {
    for suite in bookworm trixie unstable; do
      echo "deb [signed-by=$keyring] http://deb.debian.org/debian $suite main"
    done
  } > "$APT/etc/sources.list"
  APT_OPTIONS=(-o "Dir::Etc::SourceList=$APT/etc/sources.list" -o Dir::Etc::SourceParts=/dev/null
    -o "Dir::State::Lists=$APT/lists" -o "Dir::Cache=$APT" -o "Dir::State::Status=$APT/status"
    -o Debug::NoLocking=1 -o APT::Architecture=amd64 -o Acquire::Languages=none -o APT::Sandbox::User=root)
}

fetch() {  # fetch NAME: the build's folder, extracted and complete
  local name=$1 line package version suite sha data
  line=$(echo "$RELEASES" | awk -v n="$name" '$1 == n')
  read -r _ package version suite sha data <<< "$line"
  local build="$CACHE/builds/$name"
  if [ -f "$build.complete" ]; then echo "$build"; return; fi
  mkdir -p "$CACHE/debs"
  local deb="$CACHE/debs/${package}_${version#*:}_all.deb"
  if [ ! -f "$deb" ] || [ "$(sha256sum < "$deb" | cut -d' ' -f1)" != "$sha" ]; then
    apt_private
    if [ ! -f "$APT/updated-$$" ]; then  # once per run ($$ is this script's, in subshells too)
      echo "== apt-get update (private configuration under $APT)" >&2
      apt-get "${APT_OPTIONS[@]}" update -qq >&2 || {
        echo "datasets.sh: apt-get update failed; check the network to deb.debian.org" >&2; exit 69; }
      rm -f "$APT"/updated-*; touch "$APT/updated-$$"
    fi
    echo "== downloading $package $version ($suite)" >&2
    rm -rf "$CACHE/debs/partial" && mkdir -p "$CACHE/debs/partial"
    (cd "$CACHE/debs/partial" && apt-get "${APT_OPTIONS[@]}" download -q "$package=$version" >&2) || {
      echo "datasets.sh: could not download $package=$version: the archive may have dropped it from $suite" >&2; exit 69; }
    mv "$CACHE/debs/partial"/*.deb "$deb"  # apt names it with the epoch escaped (1%3a...)
  fi
  local got; got=$(sha256sum < "$deb" | cut -d' ' -f1)
  if [ "$got" != "$sha" ]; then
    echo "datasets.sh: $deb has SHA-256 $got, not the pinned $sha; delete it and run again" >&2
    exit 65
  fi
  echo "== extracting $name" >&2
  rm -rf "$build" "$build.tmp"
  mkdir -p "$build.tmp"
  dpkg-deb -x "$deb" "$build.tmp"
  [ -d "$build.tmp/$data" ] || { echo "datasets.sh: $deb holds no $data" >&2; exit 65; }
  # Debian links some files to other packages (fonts): dangling here, and not game data. A build
  # folder holds plain files only, for every tool compared alike.
  local links; links=$(find "$build.tmp/$data" -type l -print -delete | wc -l)
  [ "$links" = 0 ] || echo "== $name: left out $links symbolic links to other packages' files" >&2
  mv "$build.tmp/$data" "$build"
  rm -rf "$build.tmp"
  touch "$build.complete"
  echo "$build"
}

for pair in "${PAIRS[@]}"; do
  for name in $(pair_builds "$pair"); do
    build=$(fetch "$name")
    printf '%s %s %s %s\n' "$name" "$build" "$(find "$build" -type f | wc -l)" "$(du -sb "$build" | cut -f1)"
  done
done
