#!/usr/bin/env python3
"""The library's folders in tiers, checked: a folder may name the types of its own tier and of the
tiers below it, never of one above. `python3 Scripts/layers.py` prints each back edge (which file names
which type of which higher folder) and exits 1 when there is one; `--graph` prints every edge.

The tiers are written in LAYERS.md; this table is the same list, lowest first. Folders on one line are
one tier (they may name each other, but only where the table's `peers` allows it)."""
import os
import re
import sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "Sources", "PatchSync")
if "--root" in sys.argv:
    ROOT = sys.argv[sys.argv.index("--root") + 1]

# Lowest first. A folder may name types of any folder in an earlier tier.
TIERS = [
    ["System"],
    ["Crypto", "Chunking"],
    ["Manifest"],
    ["Objects", "Delta"],
    ["Transfer"],
    ["Origin"],
    ["Trust"],
    ["State"],
    ["Staging"],
    ["Install", "Publishing"],
    ["Upload", "Diff", "Share", "Preload"],
    ["Sync"],
]
# Within one tier, a folder may name another only where it is listed here (one way).
PEERS = {
    ("Chunking", "Crypto"),
    ("Delta", "Objects"),
}
# Files at the library's root belong to no folder: they sit above every tier, but for the library's error,
# which every tier names: it counts as System's.
TOP = "(root)"
BASE = {"PatchSyncError.swift"}

DECL = re.compile(r"^\s*(?:@\w+(?:\([^)]*\))?\s+)*(?:(?:public|internal|private|fileprivate|package|final|indirect|nonisolated)\s+)*"
                  r"(struct|class|enum|protocol|actor|typealias)\s+([A-Z][A-Za-z0-9_]*)")
WORD = re.compile(r"\b[A-Z][A-Za-z0-9_]*\b")


def strip(text):
    """Comments and string literals out, so a word in prose or a message is not a use."""
    text = re.sub(r'"""[\s\S]*?"""', '""', text)
    text = re.sub(r"/\*[\s\S]*?\*/", "", text)
    out = []
    for line in text.splitlines():
        line = re.sub(r'"(?:\\.|[^"\\])*"', '""', line)
        line = re.sub(r"//.*", "", line)
        out.append(line)
    return "\n".join(out)


def folder_of(path):
    rel = os.path.relpath(path, ROOT)
    parts = rel.split(os.sep)
    if len(parts) > 1:
        return parts[0]
    return "System" if parts[0] in BASE else TOP


def scan():
    files = {}
    for base, _, names in os.walk(ROOT):
        for name in sorted(names):
            if name.endswith(".swift"):
                path = os.path.join(base, name)
                with open(path, encoding="utf-8") as f:
                    files[path] = strip(f.read())
    owner = {}
    for path, text in files.items():
        depth = 0
        for line in text.splitlines():
            if depth == 0:
                m = DECL.match(line)
                if m:
                    owner.setdefault(m.group(2), folder_of(path))
            depth += line.count("{") - line.count("}")
    return files, owner


def rank():
    r = {}
    for i, tier in enumerate(TIERS):
        for folder in tier:
            r[folder] = i
    r[TOP] = len(TIERS)
    return r


def allowed(src, dst, r):
    if src == dst:
        return True
    if src not in r or dst not in r:
        return False
    if r[dst] < r[src]:
        return True
    return r[dst] == r[src] and (src, dst) in PEERS


def main():
    files, owner = scan()
    r = rank()
    unknown = sorted({folder_of(p) for p in files} - set(r))
    if unknown:
        print(f"layers: folder(s) {', '.join(unknown)} are in no tier; add them to TIERS in Scripts/layers.py and LAYERS.md")
        return 1
    edges = {}
    for path, text in files.items():
        src = folder_of(path)
        for word in set(WORD.findall(text)):
            dst = owner.get(word)
            if dst and dst != src:
                edges.setdefault((src, dst), {}).setdefault(word, set()).add(os.path.relpath(path, ROOT))
    if "--graph" in sys.argv:
        for (src, dst), words in sorted(edges.items()):
            mark = "" if allowed(src, dst, r) else "  BACK EDGE"
            print(f"{src} -> {dst}: {', '.join(sorted(words))}{mark}")
        return 0
    back = [(k, v) for k, v in sorted(edges.items()) if not allowed(k[0], k[1], r)]
    for (src, dst), words in back:
        for word, paths in sorted(words.items()):
            print(f"layers: {src} names {dst}'s {word} ({', '.join(sorted(paths))}); "
                  f"{src} sits below {dst} (LAYERS.md): move {word} down or the use up")
    if back:
        print(f"layers: {sum(len(w) for _, w in back)} back edge(s) between folders")
        return 1
    print(f"layers: {len(edges)} edges between {len(r) - 1} folders, all pointing down")
    return 0


def self_test():
    """The check fails when a back edge is put in on purpose: a copy of the library where System names
    Syncer, and one where Install names a type of Sync, are both refused; the copy as it is passes."""
    import shutil
    import subprocess
    import tempfile

    def run(root):
        return subprocess.run([sys.executable, os.path.abspath(__file__), "--root", root], capture_output=True, text=True)

    with tempfile.TemporaryDirectory() as tmp:
        copy = os.path.join(tmp, "PatchSync")
        shutil.copytree(ROOT, copy)
        clean = run(copy)
        if clean.returncode != 0:
            print("layers self-test: the unchanged copy fails:\n" + clean.stdout)
            return 1
        for folder, line, expect in [
            ("System", "func planted(_ s: Syncer) {}", "System names Sync's Syncer"),
            ("Install", "extension Install { func planted(_ m: SyncMeter) {} }", "Install names Sync's SyncMeter"),
        ]:
            path = os.path.join(copy, folder, "Planted.swift")
            with open(path, "w", encoding="utf-8") as f:
                f.write(line + "\n")
            got = run(copy)
            os.remove(path)
            if got.returncode != 1 or expect not in got.stdout:
                print(f"layers self-test: a back edge put in {folder} was not refused ({expect}):\n{got.stdout}")
                return 1
    print("layers self-test: back edges put in on purpose are refused")
    return 0


if __name__ == "__main__":
    sys.exit(self_test() if "--self-test" in sys.argv else main())
