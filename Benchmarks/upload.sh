#!/usr/bin/env bash
# An origin's life on an S3-compatible store: the sample game's builds 1 and 2 published and uploaded
# to moto's S3 server on loopback (SigV4 on), requests and bytes of each upload counted from the
# server's own log, then the next build published and the repository pruned to one build with the
# bucket (bytes freed, in the folder and the bucket: the first run unlists the older builds, which the
# bucket listed until then, the second removes their files), and a fresh player installing from the bucket.
#
#   bash Benchmarks/upload.sh [SCALE]     SCALE of the sample game (default 1: about 100 MB)
#
# Needs `make test`'s .venv-tuf (moto) and the release build (built if missing).
set -euo pipefail
cd "$(dirname "$0")/.."
SCALE=${1:-1}
BIN=${PATCHSYNC_BIN_DIR:-$(pwd)/.build/release}
[ -x "$BIN/patchsync" ] && [ -x "$BIN/patchsync-sample" ] || make release >/dev/null
WORK=$(mktemp -d /tmp/patchsync-upload.XXXXXX)
exec 3> >(.venv-tuf/bin/python Tests/S3/s3_server.py game > "$WORK/server.out" 2> "$WORK/server.log")
trap 'exec 3>&-; wait 2>/dev/null; rm -rf "$WORK"' EXIT
for _ in $(seq 100); do grep -q READY "$WORK/server.out" 2>/dev/null && break; sleep 0.2; done
read -r _ ENDPOINT AWS_ACCESS_KEY_ID AWS_SECRET_ACCESS_KEY < <(grep READY "$WORK/server.out")
export AWS_ACCESS_KEY_ID AWS_SECRET_ACCESS_KEY AWS_REGION=us-east-1
P="$BIN/patchsync"; K=(--targets-key "$WORK/keys/targets.key" --online-key "$WORK/keys/online.key")
for n in 1 2; do "$BIN/patchsync-sample" generate --build $n --out "$WORK/build-$n" --scale "$SCALE"; done
cp -a "$WORK/build-2" "$WORK/build-3"; head -c 3000000 /dev/urandom > "$WORK/build-3/new-in-3.bin"
$P keygen --out "$WORK/keys" >/dev/null
$P repo init --origin "$WORK/origin" --root-key "$WORK/keys/root.key" "${K[@]}" >/dev/null
puts() { grep -c '"PUT /game/forest/' "$WORK/server.log" || true; }
upload() {
  local before; before=$(puts)
  $P upload "$WORK/origin" s3://game/forest --endpoint "$ENDPOINT" --json 2>/dev/null | tail -n1 > "$WORK/upload.json"
  python3 - "$WORK/upload.json" "$1" "$(( $(puts) - before ))" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
print(f"{sys.argv[2]:<28} {r['requests']:>5} requests ({sys.argv[3]} PUTs in the server's log), "
      f"{r['bytesUploaded']:>12,} B uploaded, {r['filesSkipped']} files known present")
PY
}
for n in 1 2 3; do
  $P publish "$WORK/build-$n" --origin "$WORK/origin" --build-id "1.$n" "${K[@]}" >/dev/null 2>&1
  upload "upload after build 1.$n"
done
upload "upload again (nothing new)"
du -sb "$WORK/origin" | awk '{printf "origin folder before prune:  %d B\n", $1}'
$P repo prune --origin "$WORK/origin" --keep 1 --grace 0 --bucket s3://game/forest --endpoint "$ENDPOINT" "${K[@]}" --json \
  2>/dev/null | tail -n1 > "$WORK/prune1.json"
$P repo prune --origin "$WORK/origin" --keep 1 --grace 0 --bucket s3://game/forest --endpoint "$ENDPOINT" "${K[@]}" --json \
  2>/dev/null | tail -n1 > "$WORK/prune2.json"
python3 - "$WORK/prune1.json" "$WORK/prune2.json" <<'PY'
import json, sys
for n, path in enumerate(sys.argv[1:], 1):
    r = json.load(open(path))
    print(f"repo prune --keep 1 --grace 0, run {n}: unlisted {r['unlisted']}, {len(r['removed'])} files removed, "
          f"{r['bytesFreed']:,} B freed in the folder and the bucket")
PY
du -sb "$WORK/origin" | awk '{printf "origin folder after prune:   %d B\n", $1}'
echo "DELETEs in the server's log: $(grep -c 'DELETE /game/forest/' "$WORK/server.log" || true)"
$P init --install "$WORK/player" --remote "$ENDPOINT/game/forest" --root "$WORK/origin/metadata/root.json" >/dev/null
$P sync --install "$WORK/player" >/dev/null 2>&1 && $P apply --install "$WORK/player" >/dev/null
diff -r "$WORK/player/current" "$WORK/build-3" >/dev/null && echo "a fresh player installed build 1.3 from the pruned bucket; identical to the build folder"
