#!/usr/bin/env bash
# Runs the built tests as four processes at once: the two model tests (CPU-bound), the library's tests,
# and the command-line tests in two halves. One test process runs its tests on as many threads as the machine has
# cores, and most end-to-end tests block one of them waiting for a child process; four processes keep
# both cores busy. Each shard's output is printed whole when it ends, the failing ones last; the exit
# status is the first failing shard's.
# Usage: Scripts/test-shards.sh [swift]
set -u
swift=${1:-swift}
models='InstallModelTests|ReleaseHistoryTests'
logs=$(mktemp -d /tmp/patchsync-test-shards.XXXXXX)
# Every build the tests' fixtures publish is kept here, for the reference reader to read at the end.
export PATCHSYNC_KEEP_MANIFESTS=$logs/manifests
names=(models library cli-a-p cli-q-z)
# The command-line suites by the first letter of their type, in two halves of about equal time.
args=(
  "--filter $models"
  "--skip PatchSyncCLITests\\."
  "--filter PatchSyncCLITests\\.[A-P] --skip $models"
  "--filter PatchSyncCLITests\\.[^A-P] --skip $models"
)
# One shard: `swift test` of its filter into its log. Shards starting together can find SwiftPM's build
# database locked by another's start ("unable to attach DB"; no test has run then): that one starts again,
# up to three times.
run_shard() {
  local i=$1 niceness=$2 try code log="$logs/${names[$i]}.log"
  for try in 1 2 3; do
    # --ignore-lock: the shards share one build folder and only read it (--skip-build).
    # shellcheck disable=SC2086
    nice -n "$niceness" $swift test --skip-build --ignore-lock ${args[$i]} >"$log" 2>&1 && return 0
    code=$?
    # Only a start that ran no test is started again: a failing test is never hidden by a retry.
    if [ "$try" = 3 ] || ! grep -q "error: unable to attach DB" "$log" || grep -q "Test run with" "$log"; then
      return "$code"
    fi
    echo "== shard ${names[$i]}: SwiftPM's build database was locked at its start; starting it again"
    sleep 2
  done
}
pids=()
start=$(date +%s)
for i in "${!names[@]}"; do
  # The models yield the cores to the others (nice): their timing rules are measured end to end.
  niceness=0; [ "$i" = 0 ] && niceness=10
  run_shard "$i" "$niceness" &
  pids+=($!)
  sleep 1  # one start at a time opens the build database
done
status=0
failed=()
for i in "${!names[@]}"; do
  if wait "${pids[$i]}"; then
    echo "== shard ${names[$i]}: passed ($(( $(date +%s) - start )) s)"
    grep -E "^(model shard|release history shard|✔ Test run)" "$logs/${names[$i]}.log" || true
  else
    code=$?
    [ "$status" = 0 ] && status=$code
    failed+=("$i")
    echo "== shard ${names[$i]}: FAILED with status $code ($(( $(date +%s) - start )) s)"
  fi
done
for i in "${failed[@]}"; do
  echo "== output of the failing shard ${names[$i]} (${args[$i]}):"
  cat "$logs/${names[$i]}.log"
done
echo "== all shards ended after $(( $(date +%s) - start )) s"
if [ "$status" = 0 ]; then
  echo "== the reference reader against every binary manifest the tests published"
  bash "$(dirname "$0")/check-manifests.sh" "$PATCHSYNC_KEEP_MANIFESTS" || status=1
fi
if [ "$status" = 0 ]; then rm -rf "$logs"; else echo "== logs kept in $logs"; fi
exit "$status"
