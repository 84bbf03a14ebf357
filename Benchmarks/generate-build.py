#!/usr/bin/env python3
"""A seeded generated game build of many small files, for the scale benchmarks.

    python3 Benchmarks/generate-build.py OUT FILES [--seed N] [--mutate PERCENT --from OLD]

Writes FILES files under OUT in folders of at most 200 (levels/<a>/<b>/...), sizes drawn from a
long-tailed distribution around 4.5 KiB (200,000 files are about 0.9 GiB), half of them text-like
(compressible), half random bytes. The same seed gives the same tree, byte for byte.

With --paks N (and --pak-mib M, default 64), the build also has N big pack files paks/pakNN.pak of M MiB,
as engines ship them: 1 MiB blocks, alternately text-like and random. With --mutate, PERCENT of each pak's
bytes change too, in regions of 64 KiB to 1 MiB rewritten in place, and 4 KiB is inserted at one place
(what follows shifts): the next build of a patch that changes that share of the paks.
"""
import argparse
import os
import random
import shutil
import sys

WORDS = [b"sprite", b"level", b"unit", b"attack", b"defense", b"terrain", b"castle", b"village",
         b"forest", b"hills", b"mountain", b"water", b"image", b"sound", b"music", b"name", b"id",
         b"description", b"cost", b"movement", b"hitpoints", b"experience", b"=", b"[", b"]", b"\n"]


def size_for(rng):
    # Mostly small, a long tail: the median about 2.5 KiB, the mean about 4.5 KiB.
    return max(16, min(int(rng.lognormvariate(7.8, 1.1)), 1 << 20))


def content(rng, index, size):
    if index % 2 == 0:
        out = bytearray()
        while len(out) < size:
            out += rng.choice(WORDS) + b" "
        return bytes(out[:size])
    return rng.randbytes(size)


def path_for(index):
    return os.path.join("levels", "%03d" % (index // 40000), "%03d" % (index // 200 % 200), "f%07d.dat" % index)


def generate(out, files, seed):
    for index in range(files):
        rng = random.Random(seed * 1_000_003 + index)
        path = os.path.join(out, path_for(index))
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(content(rng, index, size_for(rng)))


def pak_block(rng, index):
    if index % 2 == 0:
        return b" ".join(rng.choices(WORDS, k=180000))[: 1 << 20].ljust(1 << 20, b" ")
    return rng.randbytes(1 << 20)


def generate_paks(out, paks, mib, seed):
    if not paks:
        return
    os.makedirs(os.path.join(out, "paks"), exist_ok=True)
    for pak in range(paks):
        rng = random.Random(seed * 7919 + pak)
        with open(os.path.join(out, "paks", "pak%02d.pak" % pak), "wb") as f:
            for block in range(mib):
                f.write(pak_block(rng, block))


def mutate_pak(path, percent, rng):
    with open(path, "rb") as f:
        data = bytearray(f.read())
    os.unlink(path)  # break the hard link: OLD stays as it was
    budget = len(data) * percent // 100
    while budget > 0:
        size = min(budget, rng.randrange(64 << 10, (1 << 20) + 1))
        at = rng.randrange(max(1, len(data) - size))
        data[at:at + size] = pak_block(rng, rng.randrange(2))[:size]
        budget -= size
    at = rng.randrange(len(data))
    data[at:at] = rng.randbytes(4096)
    with open(path, "wb") as f:
        f.write(bytes(data))


def mutate(old, out, percent, seed):
    shutil.copytree(old, out, copy_function=os.link)
    rng = random.Random(seed)
    pak_dir = os.path.join(out, "paks")
    if os.path.isdir(pak_dir):
        for name in sorted(os.listdir(pak_dir)):
            mutate_pak(os.path.join(pak_dir, name), percent, rng)
    paths = sorted(os.path.relpath(os.path.join(d, f), out) for d, _, fs in os.walk(out) for f in fs
                   if not f.endswith(".pak"))
    chosen = rng.sample(paths, max(1, len(paths) * percent // 100))
    for rel in chosen:
        path = os.path.join(out, rel)
        with open(path, "rb") as f:
            data = bytearray(f.read())
        os.unlink(path)  # break the hard link: OLD stays as it was
        at = rng.randrange(len(data))
        data[at:at + 8] = rng.randbytes(8)
        with open(path, "wb") as f:
            f.write(bytes(data))
    return len(chosen)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out")
    parser.add_argument("files", type=int)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--mutate", type=int, metavar="PERCENT")
    parser.add_argument("--from", dest="old")
    parser.add_argument("--paks", type=int, default=0)
    parser.add_argument("--pak-mib", type=int, default=64)
    args = parser.parse_args()
    if os.path.exists(args.out):
        sys.exit("generate-build.py: %s exists; give a new folder" % args.out)
    if args.mutate is not None:
        if not args.old:
            sys.exit("generate-build.py: --mutate needs --from OLD")
        print(mutate(args.old, args.out, args.mutate, args.seed))
    else:
        generate(args.out, args.files, args.seed)
        generate_paks(args.out, args.paks, args.pak_mib, args.seed)


if __name__ == "__main__":
    main()
