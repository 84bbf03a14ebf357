#!/usr/bin/env bash
# Launch-time costs, in one run:
#   - apply time for builds of 10 and of 100,000 files (targets: ratio <= 1.5, both under 10 ms),
#     as measured inside the process (the JSON report's "milliseconds"), median of several applies;
#   - launch overhead when nothing is pending, against running the game command directly (target <= 15 ms);
#   - fast verify of 100,000 files (target <= 1 s), against `openssl dgst -sha256` over the same tree.
#
#   bash Benchmarks/apply.sh [FILES]        (FILES defaults to 100000)
#
# The binary is built as a launcher would ship it: release, Swift runtime linked statically
# (`--static-swift-stdlib`, in .build-static/), which saves about 10 ms of dynamic loading per start.
set -euo pipefail
cd "$(dirname "$0")/.."
FILES=${1:-100000}
RUNS=${RUNS:-7}
swift build -c release --static-swift-stdlib --product patchsync --scratch-path .build-static >/dev/null
BIN=$(pwd)/.build-static/release
WORK=$(mktemp -d /tmp/patchsync-apply-bench.XXXXXX)
trap 'chmod -R u+w "$WORK"; rm -rf "$WORK"' EXIT
ms() { python3 -c "import sys; print('%.2f' % (float(sys.argv[1]) / 1e6))" "$1"; }
median() { sort -n | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}'; }

"$BIN/patchsync" keygen --out "$WORK/keys" >/dev/null
"$BIN/patchsync" repo init --origin "$WORK/origin" --root-key "$WORK/keys/root.key" --targets-key "$WORK/keys/targets.key" --online-key "$WORK/keys/online.key" >/dev/null

# A tree of N small files in folders of 1,000; alternating releases change one file.
make_tree() {  # DIR N
    python3 - "$1" "$2" <<'PY'
import os, sys
root, n = sys.argv[1], int(sys.argv[2])
for i in range(n):
    d = os.path.join(root, f"d{i // 1000:03d}")
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, f"f{i:06d}.dat"), "w") as f:
        f.write(f"asset {i % 97}\n")
PY
}

# Installs a channel of N-file builds and measures apply: release, sync, apply (the apply is timed).
apply_times() {  # N CHANNEL
    local n=$1 ch=$2
    local tree="$WORK/tree-$ch" game="$WORK/game-$ch"
    make_tree "$tree" "$n"
    "$BIN/patchsync" init --install "$game" --remote "file://$WORK/origin" --root "$WORK/origin/metadata/root.json" --channel "$ch" >/dev/null
    for r in $(seq 0 "$RUNS"); do
        echo "release $r" > "$tree/d000/f000000.dat"
        "$BIN/patchsync" publish "$tree" --origin "$WORK/origin" --build-id "$ch-$r" --targets-key "$WORK/keys/targets.key" --online-key "$WORK/keys/online.key" --channel "$ch" >/dev/null
        "$BIN/patchsync" sync --install "$game" >/dev/null 2>&1
        out=$("$BIN/patchsync" apply --install "$game" --json)
        [ "$r" -gt 0 ] && python3 -c "import json,sys; print(json.loads(sys.argv[1])['milliseconds'])" "$out"
    done | median
}

small=$(apply_times 10 small)
large=$(apply_times "$FILES" large)

# launch overhead: nothing pending, the game is /bin/true
t0=$(date +%s%N); for _ in $(seq 20); do /bin/true; done; t1=$(date +%s%N)
direct=$(( (t1 - t0) / 20 ))
t0=$(date +%s%N); for _ in $(seq 20); do "$BIN/patchsync" launch --install "$WORK/game-large" -- /bin/true; done; t1=$(date +%s%N)
launch=$(( (t1 - t0) / 20 ))

# fast verify (stat cache) and a full verify, against openssl dgst over the same files
t0=$(date +%s%N); "$BIN/patchsync" verify --install "$WORK/game-large" >/dev/null; t1=$(date +%s%N); verify_fast=$((t1 - t0))
t0=$(date +%s%N); "$BIN/patchsync" verify --install "$WORK/game-large" --full >/dev/null; t1=$(date +%s%N); verify_full=$((t1 - t0))
t0=$(date +%s%N); (cd "$WORK/game-large/current" && find . -type f -print0 | xargs -0 openssl dgst -sha256 >/dev/null); t1=$(date +%s%N)
openssl_ns=$((t1 - t0))

printf '%-52s %12s\n' "measure" "value"
printf '%-52s %9s ms\n' "apply, 10 files (median of $RUNS)" "$small"
printf '%-52s %9s ms\n' "apply, $FILES files (median of $RUNS)" "$large"
printf '%-52s %12s\n' "ratio large/small (target <= 1.5)" "$(python3 -c "print('%.2f' % ($large / $small))")"
printf '%-52s %9s ms\n' "/bin/true directly" "$(ms $direct)"
printf '%-52s %9s ms\n' "patchsync launch -- /bin/true, nothing pending" "$(ms $launch)"
printf '%-52s %9s ms\n' "launch overhead (target <= 15 ms)" "$(ms $((launch - direct)))"
printf '%-52s %9s ms\n' "verify, fast, $FILES files (target <= 1000 ms)" "$(ms $verify_fast)"
printf '%-52s %9s ms\n' "verify --full, $FILES files" "$(ms $verify_full)"
printf '%-52s %9s ms\n' "openssl dgst -sha256 over the same files" "$(ms $openssl_ns)"
printf '%-52s %12s\n' "ratio verify fast / openssl dgst" "$(python3 -c "print('%.2f' % ($verify_fast / $openssl_ns))")"
