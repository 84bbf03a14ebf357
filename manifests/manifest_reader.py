#!/usr/bin/env python3
"""Reference reader of PatchSync's binary manifest (format 8), written from its description alone.

Usage: manifest_reader.py MANIFEST        print the manifest's JSON view (manifest.schema.json)
       manifest_reader.py --check MANIFEST  only check it

MANIFEST is a build's target as the origin serves it (zstd-compressed), or its uncompressed bytes.
A manifest that is truncated, out of order, or that names anything it does not hold is refused:
exit status 1 and one line on stderr saying what is wrong. Needs Python 3.9+ and the zstd program.

The layout (all integers little-endian; every table 8-byte aligned):
  header (48 bytes): "PSMF", u32 version, u32 head length, u32 reserved (0), u64 file count,
                     u64 chunk count, u64 chunk-object count, u64 string table length
  head:          sorted-key JSON of the manifest with "files": [], zero-padded to a multiple of 8
  files:         88 bytes each, paths strictly ascending bytewise:
                 sha256[32] object[32] size:i64 chunk_count:u32 mode:u32 path_length:u16 bundle:u16
                 reserved:u32 (0)
  chunks:        64 bytes each, file after file:
                 sha256[32] offset:i64 object_offset:i64 length:u32 stored_length:u32 codec:u8
                 (0 raw, 1 zlib, 2 zstd) flags:u8 (1: its object is the next chunk-object entry;
                 2: the file is this one chunk, its sha256 is the file's and zero here) zero[6]
  chunk objects: 32-byte SHA-256 each, one per flagged chunk, in chunk order
  strings:       the paths' UTF-8, file after file, nothing else
"""

import json
import struct
import subprocess
import sys

MAGIC = b"PSMF"
VERSIONS = (8,)
CODECS = ("raw", "zlib", "zstd")
LIMIT = 512 << 20


class Refused(Exception):
    pass


def inflate(data):
    if data[:4] == b"\x28\xb5\x2f\xfd":
        run = subprocess.run(["zstd", "-q", "-d", "-c", "--memory=512MB"], input=data, capture_output=True)
        if run.returncode != 0:
            raise Refused("not a whole zstd frame: " + run.stderr.decode(errors="replace").strip())
        data = run.stdout
        if len(data) > LIMIT:
            raise Refused("inflates beyond 512 MiB")
    return data


class Cursor:
    def __init__(self, data):
        self.data, self.at = data, 0

    def take(self, n, name):
        if n < 0 or self.at + n > len(self.data):
            raise Refused("truncated: ends inside the %s" % name)
        piece = self.data[self.at:self.at + n]
        self.at += n
        return piece


def read(data):
    data = inflate(data)
    c = Cursor(data)
    magic, version, head_len, reserved, n_files, n_chunks, n_objects, n_str = struct.unpack(
        "<4sIIIQQQQ", c.take(48, "header"))
    if magic != MAGIC:
        raise Refused("does not start with PSMF")
    if version not in VERSIONS:
        raise Refused("format version %d; this reader knows %s" % (version, VERSIONS))
    if reserved != 0:
        raise Refused("reserved header field is not 0")
    head = json.loads(c.take(head_len, "head").decode("utf-8"))
    if head.get("files") != [] or head.get("formatVersion") != version:
        raise Refused("head lists files or names another version")
    if any(c.take((8 - c.at % 8) % 8, "padding")):
        raise Refused("padding is not zero")
    file_table = c.take(88 * n_files, "file table")
    chunk_table = c.take(64 * n_chunks, "chunk table")
    object_table = c.take(32 * n_objects, "chunk-object table")
    strings = c.take(n_str, "string table")
    if c.at != len(data):
        raise Refused("bytes after the string table")
    bundles = [b["name"] for b in head["bundles"]]
    files, path_at, chunk_at, object_at, last_path = [], 0, 0, 0, None
    for i in range(n_files):
        rec = file_table[88 * i:88 * (i + 1)]
        size, n_ch, mode, p_len, bundle, reserved = struct.unpack("<qIIHHI", rec[64:])
        if reserved != 0 or p_len == 0 or path_at + p_len > len(strings):
            raise Refused("file %d: path outside the string table, or reserved bytes set" % i)
        if bundle >= len(bundles) or chunk_at + n_ch > n_chunks:
            raise Refused("file %d: bundle or chunks out of range" % i)
        raw_path = strings[path_at:path_at + p_len]
        if last_path is not None and not last_path < raw_path:
            raise Refused("file %d: paths not strictly ascending" % i)
        path = raw_path.decode("utf-8")
        chunks, offset = [], 0
        for k in range(chunk_at, chunk_at + n_ch):
            crec = chunk_table[64 * k:64 * (k + 1)]
            c_off, o_off, length, stored, codec, flags = struct.unpack("<qqIIBB", crec[32:58])
            if crec[58:64] != bytes(6) or codec >= len(CODECS) or flags > 3:
                raise Refused("file %d chunk %d: codec, flags or padding wrong" % (i, k - chunk_at))
            chunk_sha = crec[:32]
            if flags & 2:
                if n_ch != 1 or chunk_sha != bytes(32):
                    raise Refused("file %d: a chunk standing for the whole file, but not alone or with a hash" % i)
                chunk_sha = rec[:32]
            if c_off != offset or length == 0:
                raise Refused("file %d: chunks do not tile the file" % i)
            offset += length
            chunk = {"offset": c_off, "length": length, "sha256": chunk_sha.hex(),
                     "objectOffset": o_off, "objectLength": stored, "codec": CODECS[codec]}
            if flags & 1:
                if object_at >= n_objects:
                    raise Refused("more flagged chunks than chunk objects")
                chunk["object"] = object_table[32 * object_at:32 * (object_at + 1)].hex()
                object_at += 1
            chunks.append(chunk)
        if offset != size:
            raise Refused("file %d: chunks add up to %d bytes, not %d" % (i, offset, size))
        files.append({"path": path, "size": size, "mode": mode, "sha256": rec[:32].hex(),
                      "object": rec[32:64].hex(), "bundle": bundles[bundle], "chunks": chunks})
        path_at += p_len
        chunk_at += n_ch
        last_path = raw_path
    if path_at != n_str or chunk_at != n_chunks or object_at != n_objects:
        raise Refused("string, chunk or chunk-object bytes that no file names")
    head["files"] = files
    return head


def main(argv):
    check = "--check" in argv
    paths = [a for a in argv if a != "--check"]
    if len(paths) != 1:
        sys.stderr.write(__doc__)
        return 2
    with open(paths[0], "rb") as f:
        data = f.read()
    try:
        manifest = read(data)
    except (Refused, ValueError, UnicodeDecodeError, KeyError, TypeError, struct.error) as e:
        sys.stderr.write("%s: refused: %s\n" % (paths[0], e))
        return 1
    if not check:
        json.dump(manifest, sys.stdout, sort_keys=True, separators=(",", ":"))
        sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
