#!/usr/bin/env bash
# Preload on real game data: the new build of a pair from Benchmarks/datasets.sh published ahead with
# --release-at on top of the old one, preloaded by an install of the old build through nginx on
# loopback, released, unlocked and applied. Side by side in the same run: the same patch published
# normally and synced by a copy of the install, `patchsync verify --full` and `openssl dgst -sha256`
# over the new build. Prints what a preload costs against the normal patch (bytes), what the release
# costs (bytes fetched after it), the unlock's time against verify --full's, and what the origin
# reveals of the new build before the release (its new file names and a sample of each new file's
# bytes, searched for in every file of the origin and in its gunzip'd targets, beyond what the origin
# held before; the same scan of the normal publish is the control that shows it finds them).
# Everything runs on one fresh ext4 file system (a loop-mounted image), as Benchmarks/publish.sh does:
# this machine's root file system charges its history of deleted files to every file created.
#
#   sudo bash Benchmarks/preload.sh [supertuxkart|wesnoth]
#
# Installs what is missing (nginx, bc, curl). Needs about 6 GB in /var/tmp for SuperTuxKart.
set -euo pipefail
cd "$(dirname "$0")/.."
PAIR=${1:-supertuxkart}
. Benchmarks/lib.sh

need_tools nginx bc curl
pair_builds "$PAIR"
WORK=$(mktemp -d /tmp/patchsync-preload.XXXXXX)
NGINX_PID=""
IMAGE=$(mktemp /var/tmp/patchsync-preload-fs.XXXXXX)
trap '[ -n "$NGINX_PID" ] && kill $NGINX_PID 2>/dev/null; wait 2>/dev/null; mountpoint -q "$WORK" && umount "$WORK"; rm -rf "$WORK" "$IMAGE"' EXIT
[ "$(id -u)" = 0 ] || { echo "run as root (a loop-mounted file system)" >&2; exit 77; }
truncate -s $(( $(du -sb "$NEW" | cut -f1) * 8 + (1 << 30) )) "$IMAGE"
mkfs.ext4 -q -F "$IMAGE"
mount -o loop "$IMAGE" "$WORK"
now() { date +%s.%N; }
secs() { echo "scale=2; ($2 - $1) / 1" | bc; }
ps_() { "$BIN/patchsync" "$@"; }

mkdir -p "$WORK/www"
export NGINX_ACCESS_LOG="$WORK/access.log"
start_nginx
URL="http://127.0.0.1:$PORT"
ps_ keygen --out "$WORK/keys" >/dev/null
K=(--targets-key "$WORK/keys/targets.key" --online-key "$WORK/keys/online.key")
ps_ repo init --origin "$WORK/www/preload" --root-key "$WORK/keys/root.key" "${K[@]}" >/dev/null
ps_publish "$WORK/www/preload" "$OLD" "$OLD_NAME" 0 >/dev/null
cp -a "$WORK/www/preload" "$WORK/www/normal"
ps_ init --install "$WORK/install-preload" --remote "$URL/preload" --root "$WORK/www/preload/metadata/root.json" >/dev/null
ps_ sync --install "$WORK/install-preload" --quiet
ps_ apply --install "$WORK/install-preload" >/dev/null
cp -a "$WORK/install-preload" "$WORK/install-normal"
sed -i "s|$URL/preload|$URL/normal|" "$WORK/install-normal/.patchsync/config.json"

# The normal patch: published at once, synced by a copy of the install.
ps_publish "$WORK/www/normal" "$NEW" "$NEW_NAME" 2 >/dev/null
offset=$(stat -c %s "$WORK/access.log")
find "$WORK/install-normal" -type f -exec cat {} + > /dev/null
t0=$(now)
ps_ sync --install "$WORK/install-normal" --quiet
normal_sync=$(secs "$t0" "$(now)")
read -r normal_bytes normal_requests <<<"$(served_since "$offset" /normal/)"

# The preload: sealed until tomorrow, fetched ahead; the origin scanned; then released and unlocked.
cp -a "$WORK/www/preload" "$WORK/baseline"
release_at=$(date -u -d tomorrow +%Y-%m-%dT%H:%M:%SZ)
publish_seconds=$(ps_publish "$WORK/www/preload" "$NEW" "$NEW_NAME" 2 --release-at "$release_at" \
  --content-keys "$WORK/keys/content")
offset=$(stat -c %s "$WORK/access.log")
ps_ sync --install "$WORK/install-preload" --json > "$WORK/preload.json"
read -r preload_bytes preload_requests <<<"$(served_since "$offset" /preload/)"
grep -q '"outcome":"preloaded"' "$WORK/preload.json" || { echo "the preload did not preload" >&2; tail -3 "$WORK/preload.json" >&2; exit 1; }
if ps_ apply --install "$WORK/install-preload" >/dev/null 2>&1; then echo "apply made a locked preload current" >&2; exit 1; fi

# scan ORIGIN…: how many of the new build's new file names and new-content samples each origin holds
scan() {
python3 - "$OLD" "$NEW" "$@" <<'PY'
import gzip, mmap, os, subprocess, sys
old, new, origins = sys.argv[1], sys.argv[2], sys.argv[3:]
def files(root):
    out = {}
    for folder, _, names in os.walk(root):
        for name in names:
            full = os.path.join(folder, name)
            if os.path.isfile(full) and not os.path.islink(full):
                out[os.path.relpath(full, root)] = full
    return out
before, after = files(old), files(new)
added = [p for p in after if p not in before]
names = sorted({os.path.basename(p).encode() for p in added if len(os.path.basename(p)) >= 8}
               - {os.path.basename(p).encode() for p in before})
samples = []
for p in added + [p for p in after if p in before and open(after[p], "rb").read() != open(before[p], "rb").read()]:
    data = open(after[p], "rb").read()
    if len(data) >= 4096:
        samples.append(data[len(data) // 2:len(data) // 2 + 64])
needles = names + samples
out = [str(len(names)), str(len(samples))]
for origin in origins:
    found = set()
    for folder, _, entries in os.walk(origin):
        for entry in entries:
            full = os.path.join(folder, entry)
            if os.path.getsize(full) == 0:
                continue
            with open(full, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
                blobs = [m]
                if m[:2] == b"\x1f\x8b":
                    blobs.append(gzip.decompress(m[:]))
                elif m[:4] == b"\x28\xb5\x2f\xfd":  # a binary manifest, zstd-compressed
                    blobs.append(subprocess.run(["zstd", "-q", "-d", "-c"], input=m[:], capture_output=True).stdout)
                for blob in blobs:
                    for i, n in enumerate(needles):
                        if i not in found and blob.find(n) != -1:
                            found.add(i)
    out.append(",".join(str(i) for i in sorted(found)) or "-")
print(" ".join(out))
PY
}
# what the origin held before (the old build's content holds some samples: unchanged middles of changed files)
leaks=$(scan "$WORK/baseline" "$WORK/www/preload" "$WORK/www/normal")
read -r new_names new_samples base_found preload_found normal_found <<<"$leaks"
beyond() { comm -13 <(tr , '\n' <<<"$1" | grep -v '^-$' | sort) <(tr , '\n' <<<"$2" | grep -v '^-$' | sort) | wc -l; }
leaked=$(beyond "$base_found" "$preload_found"); control=$(beyond "$base_found" "$normal_found")

offset=$(stat -c %s "$WORK/access.log")
ps_ repo release "$NEW_NAME" --origin "$WORK/www/preload" --online-key "$WORK/keys/online.key" --content-keys "$WORK/keys/content" >/dev/null
find "$WORK/install-preload" -type f -exec cat {} + > /dev/null  # the same warm cache for both rows
t0=$(now)
ps_ sync --install "$WORK/install-preload" --quiet
t1=$(now)
read -r after_bytes after_requests <<<"$(served_since "$offset" /preload/)"
ps_ apply --install "$WORK/install-preload" >/dev/null
diff -r "$NEW" "$WORK/install-preload/current/" >/dev/null || { echo "the unlocked install differs from $NEW_NAME" >&2; exit 1; }
find "$WORK/install-preload/current/" -type f -exec cat {} + > /dev/null
t2=$(now)
ps_ verify --install "$WORK/install-preload" --full >/dev/null
t3=$(now)
find "$NEW" -type f -print0 | xargs -0 cat > /dev/null
t4=$(now)
find "$NEW" -type f -print0 | xargs -0 openssl dgst -sha256 > /dev/null
t5=$(now)
unlock=$(secs "$t0" "$t1"); verify=$(secs "$t2" "$t3"); openssl=$(secs "$t4" "$t5")

echo
echo "Preload of $NEW_NAME on $OLD_NAME ($(du -sb "$NEW" | cut -f1) bytes), published in ${publish_seconds} s"
printf '| %-52s | %14s | %9s |\n' "what" "bytes" "requests"
printf '| %-52s | %14s | %9s |\n' "---" "---:" "---:"
printf '| %-52s | %14s | %9s |\n' "normal patch (published at once), whole sync" "$normal_bytes" "$normal_requests"
printf '| %-52s | %14s | %9s |\n' "preload before the release, whole sync" "$preload_bytes" "$preload_requests"
printf '| %-52s | %14s | %9s |\n' "after the release (metadata, key)" "$after_bytes" "$after_requests"
echo
echo "preload ÷ normal patch: $(echo "scale=3; $preload_bytes / $normal_bytes" | bc)  (target ≤ 1.02)"
echo "bytes after the release: $after_bytes  (target ≤ 65536)"
echo "unlock (sync after the release): ${unlock} s; the normal patch's sync (the same staging, and the download): ${normal_sync} s"
echo "verify --full of the new build: ${verify} s; openssl dgst -sha256 over it: ${openssl} s"
echo "unlock ÷ verify --full: $(echo "scale=2; $unlock / $verify" | bc)  (target ≤ 1.0); unlock ÷ normal sync: $(echo "scale=2; $unlock / $normal_sync" | bc)"
echo "the origin before the release: ${leaked} of ${new_names} new file names and ${new_samples} new-content samples found beyond the old build's  (target 0)"
echo "the same scan of the normal publish (control): ${control} found"
