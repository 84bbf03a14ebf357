#!/usr/bin/env bash
# Has the reference reader of the binary manifest (manifests/manifest_reader.py, written apart from
# the library) read every manifest in FOLDER, and compares what it sees with what the library decodes
# (`patchsync manifest show --decoded`): the two must agree on every one, reading it alike or both
# refusing it. The test run fills FOLDER
# with every build its fixtures published (PATCHSYNC_KEEP_MANIFESTS).
# Usage: Scripts/check-manifests.sh FOLDER [PATCHSYNC]
set -u
folder=$1
patchsync=${2:-.build/debug/patchsync}
here=$(cd "$(dirname "$0")/.." && pwd)
count=0; failed=0; refused=0
for file in "$folder"/*.gz; do
  [ -f "$file" ] || continue
  count=$((count + 1))
  python3 "$here/manifests/manifest_reader.py" "$file" >"$file.reference" 2>"$file.why"; theirs=$?
  "$patchsync" manifest show "$file" --decoded >"$file.library" 2>>"$file.why"; ours=$?
  if [ "$theirs" != 0 ] && [ "$ours" != 0 ]; then
    refused=$((refused + 1))  # a lying build a test planted: both refuse it
  elif [ "$theirs" != 0 ] || [ "$ours" != 0 ]; then
    echo "only one reader refused $(basename "$file"): $(cat "$file.why")"; failed=$((failed + 1))
  elif ! python3 -c 'import json, sys; d = lambda p: json.dumps(json.load(open(p)), sort_keys=True)
sys.exit(d(sys.argv[1]) != d(sys.argv[2]))' "$file.reference" "$file.library"; then
    # Compared as canonical text: 1, 1.0 and true are not the same value here.
    echo "the reference reader and the library read $(basename "$file") differently"; failed=$((failed + 1))
  fi
  rm -f "$file.reference" "$file.library" "$file.why"
done
echo "binary manifests read by the reference reader and the library: $count (both refused $refused a test planted), disagreeing: $failed"
[ "$count" -gt 0 ] && [ "$failed" = 0 ]
