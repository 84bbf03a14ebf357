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
  head:          the manifest with "files": [] as JSON, sorted keys and no spaces (one encoding only),
                 zero-padded to a multiple of 8
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
HEAD_KEYS = {"formatVersion", "buildId", "channel", "sequence", "chunking", "bundles", "files", "deltas",
             "links", "folders", "sealed"}
VERSIONS = (8,)
CODECS = ("raw", "zlib", "zstd")
LIMIT = 512 << 20


class Refused(Exception):
    pass


def frame_content_size(data):
    """The content size a zstd frame header states (RFC 8878, 3.1.1.1), or None."""
    if len(data) < 6:
        return None
    descriptor = data[4]
    fcs_flag, single = descriptor >> 6, (descriptor >> 5) & 1
    dict_bytes = (0, 1, 2, 4)[descriptor & 3]
    at = 5 + (0 if single else 1) + dict_bytes
    width = (1 if single else 0, 2, 4, 8)[fcs_flag]
    if width == 0 or len(data) < at + width:
        return None
    size = int.from_bytes(data[at:at + width], "little")
    return size + 256 if width == 2 else size


def inflate(data):
    if data[:4] != b"\x28\xb5\x2f\xfd":
        return data
    size = frame_content_size(data)
    if size is None or size > LIMIT:
        raise Refused("a zstd frame without a stated size of at most 512 MiB")
    run = subprocess.Popen(["zstd", "-q", "-d", "-c", "--memory=2048MB"], stdin=subprocess.PIPE,
                           stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    run.stdin.write(data)
    run.stdin.close()
    out = run.stdout.read(size + 1)
    run.stdout.close()
    if run.wait() != 0 or len(out) != size:
        raise Refused("not one whole zstd frame of the size it states")
    return out


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
    raw_head = c.take(head_len, "head")
    head = json.loads(raw_head.decode("utf-8"))
    if not isinstance(head, dict) or head.get("files") != [] or head.get("formatVersion") != version:
        raise Refused("head is not a manifest without files, or names another version")
    if not set(head) <= HEAD_KEYS:
        raise Refused("head has keys a manifest does not: %s" % sorted(set(head) - HEAD_KEYS))
    canonical = json.dumps(head, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    if canonical != raw_head:
        raise Refused("head is not in its one encoding (sorted keys, no spaces)")
    if any(c.take((8 - c.at % 8) % 8, "padding")):
        raise Refused("padding is not zero")
    file_table = c.take(88 * n_files, "file table")
    chunk_table = c.take(64 * n_chunks, "chunk table")
    object_table = c.take(32 * n_objects, "chunk-object table")
    strings = c.take(n_str, "string table")
    if c.at != len(data):
        raise Refused("bytes after the string table")
    bundles = [b["name"] for b in head["bundles"]]
    files, path_at, chunk_at, object_at, last_path, seen_folded = [], 0, 0, 0, None, set()
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
        if path.startswith("/") or any(part in ("", ".", "..") for part in path.split("/")):
            raise Refused("file %d: path %r would escape the install" % (i, path))
        if mode & ~0o777 or mode & 0o002:
            raise Refused("file %d: mode %o is not permission bits, or is world-writable" % (i, mode))
        folded = path.lower()
        if folded in seen_folded:
            raise Refused("file %d: %r differs from another path only in case" % (i, path))
        seen_folded.add(folded)
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
            elif n_ch == 1 and chunk_sha == rec[:32]:
                raise Refused("file %d: its one chunk repeats the file's hash instead of saying so (flag 2)" % i)
            if stored == 0:
                raise Refused("file %d: a chunk with no stored bytes" % i)
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
    except Exception as e:  # anything a hostile manifest provokes is a refusal, never a traceback
        sys.stderr.write("%s: refused: %s\n" % (paths[0], e))
        return 1
    if not check:
        json.dump(manifest, sys.stdout, sort_keys=True, separators=(",", ":"))
        sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
