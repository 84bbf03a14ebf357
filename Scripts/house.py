#!/usr/bin/env python3
"""The house figures of the library, as the reviews measure them: lines and files, functions over 60
lines, the Syncer's size, lines over 120 columns, sleeps and wall-clock expectations in the tests.
`python3 Scripts/house.py` prints them; `--check` exits 1 when a limit of LAYERS.md is broken."""
import os
import re
import sys

HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
LIB = os.path.join(HERE, "Sources", "PatchSync")
TESTS = os.path.join(HERE, "Tests")
FUNC = re.compile(r"^\s*(?:@\w+(?:\([^)]*\))?\s+)*(?:(?:public|internal|private|fileprivate|static|mutating|override|final|nonisolated|@discardableResult|class)\s+)*(func\s+\w+|init\??\s*[<(]|subscript\s*\(|var\s+\w+\s*:[^=]*\{\s*$)")
# What `--check` (run by `make lint`) holds the code to.
LIMITS = {"longest function": 60, "Syncer lines": 1000, "test sleeps": 11, "wall-clock expectations": 9}


def swift_files(root):
    for base, _, names in os.walk(root):
        for name in sorted(names):
            if name.endswith(".swift"):
                yield os.path.join(base, name)


def code(line):
    line = re.sub(r'"(?:\\.|[^"\\])*"', '""', line)
    return re.sub(r"//.*", "", line)


def functions(path):
    """(name, first line, length) of each function, initializer and computed property in `path`."""
    lines = open(path, encoding="utf-8").read().split("\n")
    found = []
    for i, line in enumerate(lines):
        m = FUNC.match(line)
        if not m:
            continue
        depth, opened = 0, False
        for j in range(i, len(lines)):
            c = code(lines[j])
            depth += c.count("{") - c.count("}")
            opened = opened or "{" in c
            if opened and depth <= 0:
                found.append((m.group(1).strip(), i + 1, j - i + 1))
                break
            if not opened and j > i + 12:
                break  # a protocol requirement: no body
    return found


def figures():
    lib = list(swift_files(LIB))
    lines = sum(len(open(p, encoding="utf-8").read().split("\n")) for p in lib)
    funcs = [(os.path.relpath(p, LIB), name, at, n) for p in lib for name, at, n in functions(p)]
    long = sorted([f for f in funcs if f[3] > 60], key=lambda f: -f[3])
    syncer = sum(len(open(p, encoding="utf-8").read().split("\n")) for p in lib
                 if os.path.basename(p).startswith("Syncer") and os.sep + "Sync" + os.sep in p)
    wide = sum(1 for p in lib for l in open(p, encoding="utf-8") if len(l.rstrip("\n")) > 120)
    tests = list(swift_files(TESTS)) + list(swift_files(os.path.join(HERE, "Sources", "PatchSyncTestSupport")))
    sleeps = wall = 0
    for p in tests:
        for l in open(p, encoding="utf-8"):
            c = code(l)
            if re.search(r"(?<!time\.)\b(Task\.sleep|usleep|Thread\.sleep|sleep)\(", c):
                sleeps += 1
            # An expectation on a time the test measured itself (a rate over elapsed time counts too).
            if "#expect" in c and re.search(
                r"elapsed|timeIntervalSince|ContinuousClock\.now|\btook\b|\bstopped\b *<|run\.seconds|(?<!controller\.)\brate *<=", c
            ):
                wall += 1
    return {
        "library lines / files": f"{lines} / {len(lib)}",
        "functions over 60 lines": len(long),
        "longest function": max((f[3] for f in funcs), default=0),
        "Syncer lines": syncer,
        "lines over 120 columns": wide,
        "test sleeps": sleeps,
        "wall-clock expectations": wall,
    }, long


def main():
    fig, long = figures()
    for k, v in fig.items():
        print(f"{k}: {v}")
    for path, name, at, n in long:
        print(f"  {n} lines: {path}:{at} {name}")
    if "--check" in sys.argv:
        broken = [f"{k} {fig[k]} > {v}" for k, v in LIMITS.items() if fig[k] > v]
        if broken:
            print("house: over the limits: " + "; ".join(broken))
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
