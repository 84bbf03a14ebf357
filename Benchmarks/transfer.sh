#!/usr/bin/env bash
# The transfer engine against the tools a launcher engineer would otherwise use, side by side in
# one run, against one nginx (issue 7):
#   1. full install of a 1 GiB build (half incompressible, half compressible) over loopback, into the
#      machine's disk and into a tmpfs (the disk taken out: what the engine itself costs), against
#      the CPU limit (inflate + SHA-256 of the same chunks on two cores, patchsync-bench), against
#      `curl -s URL | openssl dgst -sha256` and `aria2c -x4` + `openssl dgst -sha256` over the same
#      uncompressed bytes, and on the incompressible half alone against curl | openssl;
#   2. the same install over a rate-limited link (tc tbf in a network namespace) against
#      compressed bytes ÷ link rate, and curl of the same objects over that link;
#   3. `sync --max-rate` against the cap over about 30 s;
#   4. peak RSS (/usr/bin/time -v) for 256 MiB and 2 GiB builds;
#   5. requests per patch and bytes fetched per byte needed for the demo's patch, per coalescing
#      gap, and install time per connection count (how the defaults were chosen).
#
#   sudo bash Benchmarks/transfer.sh [RATE_MIB]     (root for the network namespace; RATE_MIB default 20)
set -euo pipefail
cd "$(dirname "$0")/.."
RATE_MIB=${1:-20}
ROOT=$(pwd)
. Benchmarks/lib.sh
BIN=$ROOT/.build/release
swift build -c release --product patchsync >/dev/null
swift build -c release --product patchsync-sample >/dev/null
swift build -c release --product patchsync-bench >/dev/null
missing=""
for tool in aria2c:aria2 nginx:nginx tc:iproute2 bc:bc; do
  command -v "${tool%%:*}" >/dev/null || missing="$missing ${tool##*:}"
done
[ -x /usr/bin/time ] || missing="$missing time"
if [ -n "$missing" ]; then apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $missing >/dev/null; fi
[ "$(id -u)" = 0 ] || { echo "run as root: the rate-limited link needs a network namespace" >&2; exit 77; }

WORK=$(mktemp -d /var/tmp/patchsync-transfer.XXXXXX)
NS=psbench$$
NGINX_PID=""
cleanup() {
  [ -n "$NGINX_PID" ] && kill "$NGINX_PID" 2>/dev/null
  ip netns del "$NS" 2>/dev/null || true
  ip link del "v$NS" 2>/dev/null || true
  wait 2>/dev/null || true
  umount "$WORK/tmpfs" 2>/dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT  # KEEP=1 keeps the work folder (for a look after a failure)
[ "${KEEP:-}" = 1 ] && trap 'kill $NGINX_PID 2>/dev/null; ip netns del $NS 2>/dev/null; echo "kept $WORK" >&2' EXIT
now() { date +%s.%N; }
secs() { echo "$2 - $1" | bc; }
psync() { "$BIN/patchsync" "$@"; }
json() { python3 -c "import json,sys; d=json.loads(sys.stdin.read().strip().splitlines()[-1]); print(d$1)"; }
log() { echo "== $*" >&2; }

# --- builds: 32 MiB files of random bytes (stored as is) and of skewed letters (zlib ~60%) -------
MAP=$(python3 -c "print(('e'*40+' '*36+'t'*20+'a'*18+'o'*16+'i'*14+'n'*14+'s'*12+'r'*12+'h'*10+'l'*10+'d'*8+'c'*8+'u'*6+'m'*6+'\\n'*6+'f'*4+'g'*4+'p'*4+'y'*4)[:256])")
files() {  # files DIR FROM TO: random and text files numbered FROM..TO
  mkdir -p "$1"
  for i in $(seq "$2" "$3"); do
    openssl rand $((32 << 20)) > "$1/rand-$i.bin"
    openssl rand $((32 << 20)) | tr '\000-\377' "$MAP" > "$1/text-$i.txt"
  done
}
log "generating builds"
N=${BENCH_FILES:-16}  # pairs of 32 MiB files: 16 makes the 1 GiB build (at least 4: a quick trial run)
[ "$N" -ge 4 ] || { echo "BENCH_FILES must be at least 4 (the 256 MiB build takes 4 pairs)" >&2; exit 64; }
files "$WORK/full" 1 "$N"                                       # 1 GiB
FULL="$((N * 64)) MiB"; HALF="$((N * 32)) MiB"; BIG="$((N * 128)) MiB"  # the sizes the table names
mkdir -p "$WORK/rand" "$WORK/small" "$WORK/big"
ln "$WORK"/full/rand-*.bin "$WORK/rand/"                       # its incompressible half, 512 MiB
for i in 1 2 3 4; do ln "$WORK/full/rand-$i.bin" "$WORK/full/text-$i.txt" "$WORK/small/"; done  # 256 MiB
ln "$WORK"/full/* "$WORK/big/"; files "$WORK/big" $((N + 1)) $((2 * N))  # 2 GiB
mkdir -p "$WORK/www/raw"
cat "$WORK"/full/* > "$WORK/www/raw/full.bin"
cat "$WORK"/rand/* > "$WORK/www/raw/rand.bin"

log "publishing (1 GiB, its halves, 256 MiB, 2 GiB, the demo's two builds)"
psync keygen --out "$WORK/keys" >/dev/null
psync repo init --origin "$WORK/www/origin" --root-key "$WORK/keys/root.key" --targets-key "$WORK/keys/targets.key" --online-key "$WORK/keys/online.key" >/dev/null
publish() { psync publish "$1" --origin "$WORK/www/origin" --build-id "$2" --channel "$3" --targets-key "$WORK/keys/targets.key" --online-key "$WORK/keys/online.key" >/dev/null 2>&1; }
publish "$WORK/full" 1 live
publish "$WORK/rand" r1 rand
publish "$WORK/small" s1 small
publish "$WORK/big" b1 big
"$BIN/patchsync-sample" generate --build 1 --out "$WORK/demo-1" >/dev/null
"$BIN/patchsync-sample" generate --build 2 --out "$WORK/demo-2" >/dev/null
publish "$WORK/demo-1" 1 demo
manifest() { ls -t "$WORK/www/origin/targets/manifests/$1/"*.json.gz | head -1; }

# --- one nginx for everything, on loopback and on the namespace's link -------------------------
start_nginx
BASE="http://127.0.0.1:$PORT"; URL=$BASE/origin

mkinstall() {  # mkinstall NAME CHANNEL REMOTE [config-json-python-edits] [PARENT]: a fresh install, prints its folder
  local dir="${5:-$WORK/installs}/$1"
  rm -rf "$dir"
  psync init --install "$dir" --remote "$3" --root "$WORK/www/origin/metadata/root.json" --channel "$2" >/dev/null
  if [ -n "${4:-}" ]; then
    python3 -c "import json; p='$dir/.patchsync/config.json'; c=json.load(open(p)); c.update($4); json.dump(c, open(p,'w'))"
  fi
  echo "$dir"
}
timed_sync() {  # timed_sync DIR [args]: prints "seconds bytesReceived requests bytesPlanned peakKiB busy%"
  # ($WORK/rss keeps "peakKiB user-seconds kernel-seconds" of the sync process)
  local dir=$1; shift
  sync  # earlier installs' dirty pages are not this one's to write
  local t0 t1 out cpu0
  cpu0=$(head -1 /proc/stat)
  t0=$(now)
  out=$(/usr/bin/time -f "%M %U %S" -o "$WORK/rss" "$@" "$BIN/patchsync" sync --install "$dir" --json --quiet) || {
    echo "sync of $dir failed: $out" >&2; kill $$; exit 1; }
  t1=$(now)
  echo "$(secs "$t0" "$t1") $(echo "$out" | json "['bytesReceived']") $(echo "$out" | json "['requests']") $(echo "$out" | json "['bytesPlanned']") $(cut -d' ' -f1 "$WORK/rss") $(busy "$cpu0" "$(head -1 /proc/stat)")"
}
busy() {  # busy "cpu line before" "cpu line after": % of all cores' time not idle (nor waiting for I/O)
  python3 -c "import sys; a=[int(x) for x in sys.argv[1].split()[1:]]; b=[int(x) for x in sys.argv[2].split()[1:]]; d=[y-x for x,y in zip(a,b)]; print(round(100*(sum(d)-d[3]-d[4])/max(1,sum(d))))" "$1" "$2"
}
same_work() {  # same_work URL: curl | tee FILE | openssl dgst -sha256, then fsync FILE: fetch, hash, write durably
  rm -f "$WORK/same.bin"; sync
  local t0; t0=$(now)
  curl -s "$1" | tee "$WORK/same.bin" | openssl dgst -sha256 >/dev/null
  sync -d "$WORK/same.bin"
  secs "$t0" "$(now)"; rm -f "$WORK/same.bin"
}
warm() { cat "$WORK/www/origin/objects"/*/* "$WORK/www/raw"/* > /dev/null; }
# A tmpfs for installs with the disk taken out: writing there costs the CPU only.
mkdir -p "$WORK/tmpfs" && mount -t tmpfs -o size=$((N * 64 + 256))m tmpfs "$WORK/tmpfs"

# --- 1. loopback ---------------------------------------------------------------------------------
log "1. loopback installs"
cpu_full=$("$BIN/patchsync-bench" cpu-limit "$WORK/www/origin" "$(manifest live)" 2 | json "['seconds']")
cpu_rand=$("$BIN/patchsync-bench" cpu-limit "$WORK/www/origin" "$(manifest rand)" 2 | json "['seconds']")
warm
read -r full_s full_bytes full_req _ full_rss full_busy <<< "$(timed_sync "$(mkinstall full live "$URL")")"
warm
read -r rand_s _ _ _ _ rand_busy <<< "$(timed_sync "$(mkinstall rand rand "$URL")")"
rm -rf "$WORK/installs/rand"
warm
read -r tfull_s _ _ _ _ tfull_busy <<< "$(timed_sync "$(mkinstall full live "$URL" "" "$WORK/tmpfs")")"
read -r _ tfull_user tfull_sys < "$WORK/rss"
rm -rf "$WORK/tmpfs/full"
warm
read -r trand_s _ _ _ _ trand_busy <<< "$(timed_sync "$(mkinstall rand rand "$URL" "" "$WORK/tmpfs")")"
rm -rf "$WORK/tmpfs/rand"
warm
t0=$(now); curl -s "$BASE/raw/full.bin" | openssl dgst -sha256 >/dev/null; curl_full=$(secs "$t0" "$(now)")
t0=$(now); curl -s "$BASE/raw/rand.bin" | openssl dgst -sha256 >/dev/null; curl_rand=$(secs "$t0" "$(now)")
same_full=$(same_work "$BASE/raw/full.bin")
same_rand=$(same_work "$BASE/raw/rand.bin")
rm -f "$WORK/aria.bin"
t0=$(now)
aria2c -q -x4 -s4 --file-allocation=none -d "$WORK" -o aria.bin "$BASE/raw/full.bin"
openssl dgst -sha256 "$WORK/aria.bin" >/dev/null
aria_full=$(secs "$t0" "$(now)"); rm -f "$WORK/aria.bin"
# The disk's floor: writing the build's bytes durably (a sync must; curl | openssl writes nothing).
sync; t0=$(now); dd if="$WORK/www/raw/full.bin" of="$WORK/dd.bin" bs=4M conv=fsync status=none; disk_full=$(secs "$t0" "$(now)")
rm -f "$WORK/dd.bin"

# --- 2. rate-limited link ----------------------------------------------------------------------
log "2. a ${RATE_MIB} MiB/s link (tc tbf, network namespace)"
RATE_BITS=$((RATE_MIB * 1048576 * 8))
make_link "$NS" 10.213.0 "$RATE_BITS" 1mb 65535
NSURL="http://10.213.0.1:$PORT/origin"
read -r rl_s rl_bytes _ _ _ <<< "$(timed_sync "$(mkinstall rl live "$NSURL")" ip netns exec "$NS")"
rl_ideal=$(echo "$rl_bytes / ($RATE_MIB * 1048576)" | bc -l)
(cd "$WORK/www/origin" && find objects -type f) | sed "s|^|$NSURL/|" > "$WORK/urls"
t0=$(now)
ip netns exec "$NS" xargs -a "$WORK/urls" -n 32 curl -s --parallel --parallel-max 6 -o /dev/null -o /dev/null \
  -o /dev/null -o /dev/null -o /dev/null -o /dev/null -o /dev/null -o /dev/null -o /dev/null -o /dev/null \
  -o /dev/null -o /dev/null -o /dev/null -o /dev/null -o /dev/null -o /dev/null -o /dev/null -o /dev/null \
  -o /dev/null -o /dev/null -o /dev/null -o /dev/null -o /dev/null -o /dev/null -o /dev/null -o /dev/null \
  -o /dev/null -o /dev/null -o /dev/null -o /dev/null -o /dev/null -o /dev/null 2>/dev/null
rl_curl=$(secs "$t0" "$(now)")

# --- 3. bandwidth cap --------------------------------------------------------------------------
CAP_MIB=$(( full_bytes / 1048576 / 30 ))
log "3. --max-rate ${CAP_MIB}M on loopback (about 30 s)"
dir=$(mkinstall cap live "$URL")
t0=$(now); out=$(psync sync --install "$dir" --json --quiet --max-rate "${CAP_MIB}M"); cap_s=$(secs "$t0" "$(now)")
cap_bytes=$(echo "$out" | json "['bytesReceived']")
cap_rate=$(echo "$cap_bytes / $cap_s / 1048576" | bc -l)

# --- 4. peak RSS ---------------------------------------------------------------------------------
log "4. peak RSS, 256 MiB, $FULL and $BIG builds"
read -r small_s _ _ _ small_rss _ <<< "$(timed_sync "$(mkinstall small small "$URL")")"
read -r big_s _ _ _ big_rss _ <<< "$(timed_sync "$(mkinstall big big "$URL")")"
rm -rf "$WORK/installs/big" "$WORK/installs/cap" "$WORK/installs/rl"

# --- 5. the demo's patch: requests and bytes per coalescing gap; connections --------------------
log "5. the demo's patch"
dir=$(mkinstall demo demo "$URL")
psync sync --install "$dir" --quiet >/dev/null && psync apply --install "$dir" >/dev/null
cp -a "$dir" "$WORK/demo-base"
publish "$WORK/demo-2" 2 demo
gap_rows=""
for gap in 0 4096 16384 65536 262144; do
  rm -rf "$dir"; cp -a "$WORK/demo-base" "$dir"
  python3 -c "import json; p='$dir/.patchsync/config.json'; c=json.load(open(p)); c['coalesceGapBytes']=$gap; json.dump(c, open(p,'w'))"
  read -r s bytes req planned _ _ <<< "$(timed_sync "$dir")"
  gap_rows+=$(printf '%-9s %9s %12s %12s %8.2f %7.2f\n' "$gap" "$req" "$bytes" "$planned" "$(echo "$bytes / $planned" | bc -l)" "$s")$'\n'
done
conn_rows=""
for c in 1 2 4 6 8 16; do
  read -r s _ _ _ _ <<< "$(timed_sync "$(mkinstall "conn$c" small "$URL" "{'maxConnections': $c}")")"
  read -r rs _ _ _ _ <<< "$(timed_sync "$(mkinstall "connrl$c" small "$NSURL" "{'maxConnections': $c}")" ip netns exec "$NS")"
  conn_rows+=$(printf '%-12s %14.2f %18.2f\n' "$c" "$s" "$rs")$'\n'
  rm -rf "$WORK/installs/conn$c" "$WORK/installs/connrl$c"
done

# --- the table ---------------------------------------------------------------------------------
mib() { echo "scale=1; $1 / 1048576" | bc; }
ratio() { printf '%.2f' "$(echo "$1 / $2" | bc -l)"; }
echo
echo "PatchSync transfer benchmark — $(nproc) cores, $(date -u +%Y-%m-%d), nginx $(nginx -v 2>&1 | cut -d/ -f2)"
echo "$FULL build: $HALF random + $HALF text; objects fetched: $(mib "$full_bytes") MiB in $full_req requests"
echo
printf '%-58s %9s %s\n' "1. loopback, full install of $FULL" "seconds" "ratio"
printf '%-58s %9.2f %s\n' "CPU limit: inflate + SHA-256 of its chunks on 2 cores" "$cpu_full" "1.00"
printf '%-58s %9.2f %s\n' "disk floor: dd conv=fsync of the same $FULL" "$disk_full" ""
printf '%-58s %9.2f %s\n' "patchsync sync (fetch, verify, write, fsync, record)" "$full_s" "$(ratio "$cpu_full" "$full_s")× of the CPU limit, $(ratio "$disk_full" "$full_s")× of the disk floor; cores ${full_busy}% busy"
printf '%-58s %9.2f %s\n' "patchsync sync into a tmpfs (the disk taken out)" "$tfull_s" "$(ratio "$cpu_full" "$tfull_s")× of the CPU limit; cores ${tfull_busy}% busy"
printf '%-58s %9s %s\n' "   its CPU: user / kernel core-seconds" "$tfull_user / $tfull_sys" "the CPU limit's work is $(printf '%.2f' "$(echo "2 * $cpu_full" | bc -l)") core-s; 0.9× of it leaves $(printf '%.2f' "$(echo "2 * $cpu_full / 9" | bc -l)") core-s for receiving and writing $FULL (and for nginx)"
printf '%-58s %9.2f %s\n' "same work: curl | tee FILE | openssl dgst -sha256; fsync" "$same_full" "patchsync/that $(ratio "$full_s" "$same_full")"
printf '%-58s %9.2f %s\n' "curl -s URL | openssl dgst -sha256 ($FULL uncompressed)" "$curl_full" "patchsync/curl $(ratio "$full_s" "$curl_full")"
printf '%-58s %9.2f %s\n' "aria2c -x4, then openssl dgst -sha256" "$aria_full" "patchsync/aria2c $(ratio "$full_s" "$aria_full")"
printf '%-58s %9.2f %s\n' "incompressible half: CPU limit (SHA-256 only)" "$cpu_rand" ""
printf '%-58s %9.2f %s\n' "incompressible half: patchsync sync" "$rand_s" "$(ratio "$cpu_rand" "$rand_s")× of the CPU limit; cores ${rand_busy}% busy"
printf '%-58s %9.2f %s\n' "incompressible half: patchsync sync into a tmpfs" "$trand_s" "$(ratio "$cpu_rand" "$trand_s")× of the CPU limit; cores ${trand_busy}% busy"
printf '%-58s %9.2f %s\n' "incompressible half: curl | openssl dgst -sha256" "$curl_rand" "patchsync/curl $(ratio "$rand_s" "$curl_rand") (disk), $(ratio "$trand_s" "$curl_rand") (tmpfs)"
printf '%-58s %9.2f %s\n' "incompressible half: curl | tee | openssl dgst; fsync" "$same_rand" "patchsync/that $(ratio "$rand_s" "$same_rand")"
echo
printf '%-58s %9s %s\n' "2. ${RATE_MIB} MiB/s link (tc tbf), full install" "seconds" ""
printf '%-58s %9.2f %s\n' "compressed bytes ÷ link rate" "$rl_ideal" ""
printf '%-58s %9.2f %s\n' "patchsync sync" "$rl_s" "$(ratio "$rl_s" "$rl_ideal")× the ideal"
printf '%-58s %9.2f %s\n' "curl, the same objects whole, 6 parallel" "$rl_curl" "$(ratio "$rl_curl" "$rl_ideal")× the ideal"
echo
printf '%-58s %9s\n' "3. bandwidth cap" "MiB/s"
printf '%-58s %9s\n' "--max-rate" "$CAP_MIB"
printf '%-58s %9.2f %s\n' "measured over the whole sync ($(printf '%.1f' "$cap_s") s)" "$cap_rate" "$(ratio "$cap_rate" "$CAP_MIB")× the cap"
echo
printf '%-58s %9s %s\n' "4. peak RSS of sync" "MiB" "seconds"
printf '%-58s %9s %.2f\n' "256 MiB build" "$(echo "$small_rss / 1024" | bc)" "$small_s"
printf '%-58s %9s %.2f\n' "$FULL build" "$(echo "$full_rss / 1024" | bc)" "$full_s"
printf '%-58s %9s %.2f\n' "$BIG build" "$(echo "$big_rss / 1024" | bc)" "$big_s"
echo
echo "5. the demo's patch (sample build 1 → 2), per coalesceGapBytes"
printf '%-9s %9s %12s %12s %8s %7s\n' "gap" "requests" "fetched" "needed" "ratio" "seconds"
printf '%s' "$gap_rows"
echo "   install of the 256 MiB build per maxConnections"
printf '%-12s %14s %18s\n' "connections" "loopback s" "${RATE_MIB} MiB/s link s"
printf '%s' "$conn_rows"
