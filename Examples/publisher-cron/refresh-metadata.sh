#!/usr/bin/env bash
# Re-signs an origin's timestamp and snapshot before they expire (timestamp: 7 days, snapshot: 30 days
# by default) and then uploads the metadata folder to the CDN. Run it from cron (see crontab.example)
# on the machine that holds the online key, and only that key: the root and targets keys stay off it
# (whoever reads the online key can freeze updates for a while, but cannot ship a build).
#
#   ORIGIN=/srv/patchsync/origin ONLINE_KEY=/etc/patchsync/online.key \
#   UPLOAD='patchsync upload "$ORIGIN" s3://game-cdn/forest' ./refresh-metadata.sh
#
# (an S3-compatible bucket, with AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY or ~/.aws/credentials; for a
# plain web server, the released keys first: UPLOAD='rsync -a "$ORIGIN/targets/releases" cdn:/var/www/game/targets/ &&
# rsync -a --delay-updates "$ORIGIN/metadata/" cdn:/var/www/game/metadata/')
#
# Exit status: 0 re-signed (and uploaded); non-zero otherwise, with patchsync's message on stderr, so
# cron mails it. A failed run changes nothing the CDN serves.
set -euo pipefail

: "${ORIGIN:?set ORIGIN to the origin folder}"
: "${ONLINE_KEY:?set ONLINE_KEY to the online key file (mode 0600)}"
PATCHSYNC="${PATCHSYNC:-patchsync}"

# It also releases each preload build whose --release-at has come, with its key file from the folder
# publish recorded in the origin folder (else content/ beside the online key), or from CONTENT_KEYS
# when set. A due build it cannot release, or an expired targets.json or root.json (which refresh
# cannot sign: run `patchsync repo renew`), makes it exit non-zero after re-signing.
status=0
keys=()
if [ -n "${CONTENT_KEYS:-}" ]; then keys=(--content-keys "$CONTENT_KEYS"); fi
"$PATCHSYNC" repo refresh --origin "$ORIGIN" --online-key "$ONLINE_KEY" "${keys[@]}" --json || status=$?
if [ -n "${UPLOAD:-}" ]; then
  # Uploaded whatever the refresh said: what it re-signed must reach the CDN before the old expires.
  # Versioned files first is what --delay-updates gives rsync; timestamp.json is replaced last.
  eval "$UPLOAD"
fi
exit "$status"
