#!/usr/bin/env bash
# The PatchSync demo: a release engineer publishes two builds of the sample game,
# and a player's install goes from nothing to build 1, then to build 2, over HTTP
# range requests from a real nginx on loopback.
set -euo pipefail

BIN=$(cd "${1:-.build/release}" && pwd)
WORK=$(mktemp -d /tmp/patchsync-demo.XXXXXX)
SERVE_PID=""
cleanup() {
    [ -n "$SERVE_PID" ] && kill "$SERVE_PID" 2>/dev/null && wait "$SERVE_PID" 2>/dev/null
    rm -rf "$WORK"
}
trap cleanup EXIT

step() { printf '\n\033[1m==> %s\033[0m\n' "$*"; }
run() { printf '$ %s\n' "$*"; "$@"; }
ps_() { "$BIN/patchsync" "$@"; }

step "Generating the sample game, builds 1 and 2 (seed 2026, about 100 MB each)"
"$BIN/patchsync-sample" generate --build 1 --out "$WORK/build-1"
"$BIN/patchsync-sample" generate --build 2 --out "$WORK/build-2"
"$BIN/patchsync-sample" bundles --out "$WORK/bundles.json"
du -sh "$WORK/build-1" "$WORK/build-2"

step "Release engineer: keys, a repository, and build 1"
run "$BIN/patchsync" keygen --out "$WORK/keys"
run "$BIN/patchsync" repo init --origin "$WORK/origin" --root-key "$WORK/keys/root.key" --targets-key "$WORK/keys/targets.key" --online-key "$WORK/keys/online.key"
echo "bundles: base and textures required; hd-audio (audio/) and languages optional"
run "$BIN/patchsync" publish "$WORK/build-1" --origin "$WORK/origin" --bundles "$WORK/bundles.json" --build-id 1.0.0+1 --targets-key "$WORK/keys/targets.key" --online-key "$WORK/keys/online.key"

step "Serving the origin with nginx on loopback"
"$BIN/patchsync-sample" serve --root "$WORK/origin" --url-file "$WORK/url" &
SERVE_PID=$!
for _ in $(seq 100); do [ -s "$WORK/url" ] && break; sleep 0.1; done
URL=$(cat "$WORK/url")
echo "origin: $URL"

step "Player: a new install that trusts the shipped root.json, with the languages but without the HD audio"
run "$BIN/patchsync" init --install "$WORK/game" --remote "$URL" --root "$WORK/origin/metadata/root.json" --bundle languages
run "$BIN/patchsync" sync --install "$WORK/game"
run "$BIN/patchsync" apply --install "$WORK/game"
diff -r --exclude=audio "$WORK/build-1" "$WORK/game/current/" && echo "current/ is byte-identical to build 1 without audio/"

step "Player: adding the optional HD audio (only its content is fetched; it goes live whole at the next start)"
run "$BIN/patchsync" bundles --install "$WORK/game"
run "$BIN/patchsync" bundles add hd-audio --install "$WORK/game"
run "$BIN/patchsync" sync --install "$WORK/game"
run "$BIN/patchsync" launch --install "$WORK/game" -- sh -c 'echo "the game starts with bundles: $PATCHSYNC_BUNDLES"'
diff -r "$WORK/build-1" "$WORK/game/current/" && echo "current/ is byte-identical to build 1"

step "Release engineer: what will build 2 cost players? (a 50 MiB budget stops the pipeline if exceeded)"
run "$BIN/patchsync" diff "file://$WORK/origin#1.0.0+1" "$WORK/build-2" --root "$WORK/origin/metadata/root.json" \
    --bundles "$WORK/bundles.json" --budget 50M --html "$WORK/patch.html"

step "Release engineer: build 2 (about 5% changed)"
run "$BIN/patchsync" publish "$WORK/build-2" --origin "$WORK/origin" --bundles "$WORK/bundles.json" --build-id 1.0.1+2 --targets-key "$WORK/keys/targets.key" --online-key "$WORK/keys/online.key"

step "Player: the patch to build 2"
printf '$ %s\n' "patchsync sync --install $WORK/game --json"
"$BIN/patchsync" sync --install "$WORK/game" --json | tee "$WORK/sync.json" | tail -n 1
run "$BIN/patchsync" apply --install "$WORK/game"
diff -r "$WORK/build-2" "$WORK/game/current/" && echo "current/ is byte-identical to build 2"
run "$BIN/patchsync" status --install "$WORK/game"

step "What the patch cost"
python3 - "$WORK" "$BIN/patchsync" <<'PY'
import glob, json, subprocess, sys
work, patchsync = sys.argv[1], sys.argv[2]
result = json.loads(open(f"{work}/sync.json").read().strip().splitlines()[-1])
def load(build):  # the binary manifest, in its JSON view
    target = glob.glob(f"{work}/origin/targets/manifests/live/*.{build}.json.gz")[0]
    return json.loads(subprocess.run([patchsync, "manifest", "show", target, "--decoded"],
                                     check=True, capture_output=True).stdout)
old, new = load("1.0.0+1"), load("1.0.1+2")
old_chunks = {c["sha256"] for f in old["files"] for c in f["chunks"]}
size = sum(f["size"] for f in new["files"])
compressed, changed, seen = 0, 0, set()
for f in new["files"]:
    for c in f["chunks"]:
        if c["sha256"] in seen:
            continue
        seen.add(c["sha256"])
        compressed += c["objectLength"]
        if c["sha256"] not in old_chunks:
            changed += c["objectLength"]
got = result["bytesReceived"]
mib = lambda n: f"{n / 1048576:.1f} MiB"
print(f"build 2 size:                         {mib(size)}")
print(f"build 2 compressed (all chunks):      {mib(compressed)}")
print(f"compressed size of the changed chunks: {mib(changed)}")
print(f"downloaded for the patch:             {mib(got)} "
      f"({got / size:.1%} of the build, {got / compressed:.1%} of its compressed size, "
      f"{got / changed:.2f}x the changed chunks)")
PY

step "Release day: build 3 published ahead, sealed until tomorrow; players preload it"
cp -a "$WORK/build-2" "$WORK/build-3"
echo "the final boss is the lighthouse keeper" > "$WORK/build-3/spoiler-ending.txt"
RELEASE_AT=$(date -u -d tomorrow +%Y-%m-%dT%H:%M:%SZ)
run "$BIN/patchsync" publish "$WORK/build-3" --origin "$WORK/origin" --bundles "$WORK/bundles.json" --build-id 1.1.0+3 --release-at "$RELEASE_AT" --targets-key "$WORK/keys/targets.key" --online-key "$WORK/keys/online.key"
if grep -rqa "spoiler-ending" "$WORK/origin" \
   || find "$WORK/origin/targets" -name '*.gz' -exec zgrep -q "spoiler-ending" {} \; -print | grep -q .; then
  echo "the origin names a spoiler" >&2; exit 1
fi
echo "the origin names no new file: the manifest and the new content are sealed; the key is in keys/content/"
run "$BIN/patchsync" sync --install "$WORK/game"
if "$BIN/patchsync" apply --install "$WORK/game"; then echo "a locked preload was applied" >&2; exit 1; fi
echo "(apply refuses until the release: exit 75; the game still runs build 2)"

step "Release: the key goes out in signed metadata (online key only); the unlock fetches it and nothing else"
run "$BIN/patchsync" repo release 1.1.0+3 --origin "$WORK/origin" --online-key "$WORK/keys/online.key"
run "$BIN/patchsync" sync --install "$WORK/game"
run "$BIN/patchsync" apply --install "$WORK/game"
diff -r "$WORK/build-3" "$WORK/game/current/" && echo "current/ is byte-identical to build 3"
