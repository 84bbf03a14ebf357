#!/usr/bin/env bash
# Builds the libFuzzer targets (ASan + coverage) into .build-fuzz and runs each for FUZZ_SECONDS
# (default 60) on a working corpus seeded from Fuzz/Corpus/<target> (FUZZ_TARGETS="ShareRequest" picks some). Exit 1 if any target crashed;
# the crashing input is kept in .build-fuzz/crashes/ — add it to Fuzz/Corpus/<target>/ once fixed,
# so `make test` replays it for ever.
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_EACH="${FUZZ_SECONDS:-60}"
SWIFT="${SWIFT:-swift}"
declare -A corpus=([Metadata]=metadata [CanonicalJson]=canonical-json [Manifest]=manifest [Object]=object [ShareRequest]=share-request)
flags=(--scratch-path .build-fuzz --sanitize=fuzzer --sanitize=address
       -Xswiftc -sanitize-coverage=edge,inline-8bit-counters,pc-table,trace-cmp)
mkdir -p .build-fuzz/crashes
status=0
for target in ${FUZZ_TARGETS:-Metadata CanonicalJson Manifest Object ShareRequest}; do
  PATCHSYNC_FUZZ=1 "$SWIFT" build "${flags[@]}" --product "Fuzz$target" 2>&1 | grep -E "error|Compiling|complete" | tail -2
  work=".build-fuzz/corpus/${corpus[$target]}"
  mkdir -p "$work"
  echo "fuzzing $target for ${SECONDS_EACH}s (seeds: Fuzz/Corpus/${corpus[$target]})"
  if SWIFT_BACKTRACE=enable=no ".build-fuzz/debug/Fuzz$target" -max_total_time="$SECONDS_EACH" -timeout=10 \
       -rss_limit_mb=4096 -max_len=65536 -print_final_stats=1 -artifact_prefix=".build-fuzz/crashes/$target-" \
       "$work" "Fuzz/Corpus/${corpus[$target]}" > ".build-fuzz/$target.log" 2>&1; then
    grep -E "^Done|stat::number_of_executed_units" ".build-fuzz/$target.log" | sed "s/^/  $target: /"
  else
    status=1
    echo "  $target: CRASH — see .build-fuzz/$target.log and .build-fuzz/crashes/"
    grep -E "ERROR|Fatal error|Precondition" ".build-fuzz/$target.log" | head -5 | sed "s/^/  /"
  fi
done
exit $status
