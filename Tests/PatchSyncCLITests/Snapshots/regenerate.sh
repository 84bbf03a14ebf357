#!/usr/bin/env bash
# Writes help/<command path with dashes>.txt, the --help of every command in commands.txt, as
# HelpSnapshotTests sees it: 80 columns (COLUMNS=80) and no terminal (stdout is a pipe).
# Stray snapshots of commands no longer listed are removed. Review the result with `git diff`.
#
#   swift build --product patchsync && Tests/PatchSyncCLITests/Snapshots/regenerate.sh .build/debug/patchsync
#
# (PATCHSYNC_UPDATE_SNAPSHOTS=1 swift test --filter HelpSnapshotTests does the same from the tests, and
# also rewrites commands.txt from the command tree.)
set -euo pipefail

binary=${1:?usage: regenerate.sh PATH/TO/patchsync}
[ -x "$binary" ] || { echo "regenerate.sh: $binary is not an executable" >&2; exit 64; }
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$here/help"
rm -f "$here"/help/*.txt

count=0
while read -r line; do
    case $line in '' | '#'*) continue ;; esac
    read -ra words <<< "$line"
    name=$(IFS=-; echo "${words[*]}")
    # words[0] is "patchsync" itself; the rest is the path of the command.
    COLUMNS=80 "$binary" "${words[@]:1}" --help < /dev/null | cat > "$here/help/$name.txt"
    count=$((count + 1))
done < "$here/commands.txt"
echo "wrote $count help snapshots in $here/help"
