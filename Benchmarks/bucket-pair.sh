#!/usr/bin/env bash
# Publishing with the bucket as the repository (moto, a real S3-compatible server on loopback): machine A
# creates the repository and publishes OLD; machine B, with only the keys and an empty cache, publishes
# NEW (deltas included). Side by side in the same run: the same NEW published into a local origin folder
# holding OLD, then `patchsync upload` of it to another prefix.
#
# Prints what the bucket grew by (what B sent) against the new chunks + delta packs + metadata its report
# names and against what a player on OLD downloads, what B downloaded first (the repository, once per
# cache), and both ways' times.
#
#   bash Benchmarks/bucket-pair.sh supertuxkart   (or wesnoth: a pair of Benchmarks/datasets.sh)
set -euo pipefail
cd "$(dirname "$0")/.."
source Benchmarks/lib.sh
PAIR=${1:-wesnoth}
need_tools python3 bc
[ -x .venv-tuf/bin/python ] || make deps >/dev/null
pair_builds "$PAIR"
WORK=$(mktemp -d /tmp/patchsync-bucket-pair.XXXXXX)
mkfifo "$WORK/stdin"
sleep infinity >"$WORK/stdin" &
HOLD=$!
.venv-tuf/bin/python Tests/S3/s3_server.py game <"$WORK/stdin" >"$WORK/ready" 2>"$WORK/server.log" &
SERVER=$!
trap 'kill $SERVER $HOLD 2>/dev/null; chmod -R u+w "$WORK" 2>/dev/null; rm -rf "$WORK"' EXIT
for _ in $(seq 100); do grep -q READY "$WORK/ready" 2>/dev/null && break; sleep 0.2; done
read -r _ ENDPOINT AWS_ACCESS_KEY_ID AWS_SECRET_ACCESS_KEY < <(grep READY "$WORK/ready")
export AWS_ACCESS_KEY_ID AWS_SECRET_ACCESS_KEY AWS_REGION=us-east-1 AWS_SHARED_CREDENTIALS_FILE=/nonexistent
P="$BIN/patchsync"
KEYS=(--targets-key "$WORK/keys/targets.key" --online-key "$WORK/keys/online.key")
"$P" keygen --out "$WORK/keys" >/dev/null
bucket_bytes() {  # the bytes under s3://game/PREFIX
  .venv-tuf/bin/python - "$ENDPOINT" "$1" <<'PY'
import boto3, os, sys
s3 = boto3.client("s3", endpoint_url=sys.argv[1], region_name="us-east-1")
total = 0
for page in s3.get_paginator("list_objects_v2").paginate(Bucket="game", Prefix=sys.argv[2] + "/"):
    total += sum(o["Size"] for o in page.get("Contents", []))
print(total)
PY
}
size() { find "$1" -type f -printf '%s\n' 2>/dev/null | awk '{ s += $1 } END { printf "%.0f\n", s }'; }
json() { python3 -c "import json,sys; d=json.loads(sys.stdin.read().strip().splitlines()[-1]); print($1)"; }
now() { date +%s.%N; }
mib() { echo "scale=2; $1 / 1048576" | bc; }
ratio() { echo "scale=2; $1 / $2" | bc; }
bucket=(--origin s3://game/repo --endpoint "$ENDPOINT")

"$P" repo init "${bucket[@]}" --cache "$WORK/cache-a" --root-key "$WORK/keys/root.key" "${KEYS[@]}" 2>/dev/null >/dev/null
"$P" publish "$OLD" "${bucket[@]}" --cache "$WORK/cache-a" --build-id 1 "${KEYS[@]}" >/dev/null 2>&1
before=$(bucket_bytes repo)
start=$(now)
report=$("$P" publish "$NEW" "${bucket[@]}" --cache "$WORK/cache-b" --build-id 2 "${KEYS[@]}" --json 2>/dev/null | tail -1)
bucket_seconds=$(echo "$(now) - $start" | bc)
grew=$(($(bucket_bytes repo) - before))
written=$(echo "$report" | json 'd["objectBytesWritten"]')
deltas=$(echo "$report" | json 'sum(x["bytes"] for x in d["deltas"])')
downloaded=$before  # B's empty cache took the repository as it was

# The same publish into a local origin holding OLD, then an upload of it to an empty prefix.
"$P" repo init --origin "$WORK/origin" --root-key "$WORK/keys/root.key" "${KEYS[@]}" >/dev/null
"$P" publish "$OLD" --origin "$WORK/origin" --build-id 1 "${KEYS[@]}" >/dev/null
"$P" upload "$WORK/origin" s3://game/local --endpoint "$ENDPOINT" >/dev/null 2>&1
fetch=$("$P" publish "$NEW" --origin "$WORK/origin" --build-id 2 "${KEYS[@]}" --dry-run --json | tail -1 |
  json 'd["patch"]["total"]["downloadBytes"]')
local_before=$(bucket_bytes local)
start=$(now)
"$P" publish "$NEW" --origin "$WORK/origin" --build-id 2 "${KEYS[@]}" >/dev/null
"$P" upload "$WORK/origin" s3://game/local --endpoint "$ENDPOINT" >/dev/null 2>&1
local_seconds=$(echo "$(now) - $start" | bc)
local_grew=$(($(bucket_bytes local) - local_before))

echo "$OLD_NAME -> $NEW_NAME, published by a machine with only the keys and the bucket ($bucket_seconds s," \
  "downloading the repository first: $(mib "$downloaded") MiB):"
echo "  the bucket grew $(mib "$grew") MiB: $(ratio "$grew" "$((written + deltas))")× the new chunks + delta packs" \
  "($(mib "$written") + $(mib "$deltas") MiB; the rest is metadata; target ≤ 1.1×), $(ratio "$grew" "$fetch")× what" \
  "a player on $OLD_NAME downloads ($(mib "$fetch") MiB)"
echo "  side by side: publish into a local origin folder + upload took $local_seconds s" \
  "($(ratio "$bucket_seconds" "$local_seconds")× for the bucket way) and grew its prefix $(mib "$local_grew") MiB" \
  "($(ratio "$grew" "$local_grew")×)"
