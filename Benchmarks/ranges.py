"""Where a fresh install's range requests come from: reads a build's manifest in its JSON view
(`patchsync manifest show BUILD --decoded`) on standard input and prints, for gaps of 0 B to 1 MiB,
how many ranges a fresh install reads (runs of stored chunks back to back in one object, neighbours up to
the gap apart read as one) and how many bytes that reads against those it needs; then the objects those
ranges sit in, and how many requests it would take if each request carried up to 16 MiB of one object's
ranges (HTTP multi-range, `Range: bytes=a-b,c-d`).

  patchsync manifest show file:///srv/origin#10 --root root.json --decoded | python3 Benchmarks/ranges.py
"""
import collections
import json
import sys


def main():
    manifest = json.load(sys.stdin)
    by_object = collections.defaultdict(set)
    for entry in manifest["files"]:
        for chunk in entry.get("chunks", []):
            by_object[chunk.get("object", entry.get("object"))].add((chunk["objectOffset"], chunk["objectLength"]))
    need = sum(length for spans in by_object.values() for _, length in spans)
    for gap in (0, 16 << 10, 64 << 10, 256 << 10, 1 << 20):
        ranges = read = 0
        for spans in by_object.values():
            current = None
            for offset, length in sorted(spans):
                if current and offset <= current[1] + gap:
                    current[1] = max(current[1], offset + length)
                    continue
                if current:
                    ranges, read = ranges + 1, read + current[1] - current[0]
                current = [offset, offset + length]
            ranges, read = ranges + 1, read + current[1] - current[0]
        print(f"gap {gap >> 10:5d} KiB: {ranges:5d} ranges, {read} B read for {need} B ({read / need:.3f}×)")
    # The client's requests carry at most 16 MiB (its default request size); one that carried all of an
    # object's ranges up to that much would take this many.
    limit = 16 << 20
    multi = 0
    for spans in by_object.values():
        carried = 0
        for _, length in sorted(spans):
            if carried == 0 or carried + length > limit:
                multi, carried = multi + 1, 0
            carried += length
    print(f"objects: {len(by_object)}; multi-range requests of up to 16 MiB each: {multi}")


if __name__ == "__main__":
    main()
