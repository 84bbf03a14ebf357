import Foundation

/// Puts the stored chunks of small files into pack objects, so that one request carries many files:
/// the files of a publish, in path order (the files of one folder end up side by side), concatenated
/// into packs of about ``targetSize`` bytes, each named by its SHA-256 like any object. A file's
/// manifest entry then names the pack as its object, with its chunks' offsets inside it; the client
/// needs nothing new (it fetches ranges of objects and checks each chunk's hash).
///
/// Content this publish already packed is described again, not stored twice. Content already in the
/// origin never gets here: the publisher reuses its place (``KnownLayouts``). A pack is written to
/// a temporary file, unsynced, and handed to ``ObjectPlacer`` like an object.
///
/// Used on one thread (the publish's), after the workers have chunked and deflated the files.
public final class PackWriter {
    /// A pack holds at most this many stored bytes (a file that would pass it starts the next pack):
    /// under the client's default request size (16 MiB), so that a fresh install fetches a pack in one
    /// request. (Wesnoth 1.18.8, 18,189 files: 11 objects, 16 requests for a fresh install;
    /// SuperTuxKart 1.5: 57 requests; Benchmarks/RESULTS.md has the study.)
    public static let defaultTargetSize = 14 << 20
    /// Files up to this size go into packs; larger ones get an object of their own (at 128 KiB,
    /// Wesnoth still took 277 objects and 282 requests; at 1 MiB, SuperTuxKart took 248).
    public static let defaultSmallFile = 4 << 20

    let origin: String
    let targetSize: Int
    private let placer: ObjectPlacer
    private var buffer: [UInt8] = []
    /// The files of the open pack: their index in the publish, entry, and offset in the pack.
    private var members: [(index: Int, entry: FileEntry, base: Int64)] = []
    /// Content in the open pack, by file hash: its offset there and the entry whose chunks were stored
    /// (the same content chunked again may have reused other stored chunks: its own list would not match).
    private var open: [SHA256Digest: (base: Int64, entry: FileEntry)] = [:]
    /// Content in closed packs, by file hash: where it was placed (the pack, and the chunk list, shared
    /// with the entry that placed it). Only that, not the whole entry: one of these per small file of
    /// the build, so its size is most of a publish's memory (200,000 files: 120 MB as whole entries).
    private var closed: [SHA256Digest: Placement] = [:]

    /// Where content in a closed pack is: the pack's object and the chunk list that places it.
    private struct Placement {
        let object: SHA256Digest
        let chunks: [ChunkEntry]
    }
    /// Entries whose pack is written, by index in the publish; taken with ``takeFinished()``.
    private var finished: [(index: Int, entry: FileEntry)] = []
    private(set) var packsWritten = 0
    private(set) var bytesWritten: Int64 = 0
    /// Where each finished pack's files are recorded, so a publish killed before its manifest leaves
    /// packs the next one reuses (``LayoutJournal``).
    var journal: LayoutJournal?

    init(origin: String, placer: ObjectPlacer, targetSize: Int = PackWriter.defaultTargetSize) {
        self.origin = origin
        self.placer = placer
        // A pack is one object file: never over a segment (``ObjectNaming``).
        self.targetSize = max(1, min(targetSize, Int(ObjectNaming.segmentBytes) / 2))
    }

    /// Adds a small file: `entry` with chunk offsets from 0 in `stored`, its stored chunks.
    func add(index: Int, entry: FileEntry, stored: [UInt8]) throws(PatchSyncError) {
        guard !stored.isEmpty else {  // an empty file: no chunk to place
            finished.append((index, entry))
            return
        }
        if let placed = closed[entry.sha256] {
            finished.append((index, Self.placing(entry, object: placed.object, chunks: placed.chunks)))
            return
        }
        if let first = open[entry.sha256] {
            members.append(
                (index, Self.placing(entry, object: first.entry.object, chunks: first.entry.chunks), first.base))
            return
        }
        if !buffer.isEmpty && buffer.count + stored.count > targetSize { try close() }
        if buffer.capacity < targetSize { buffer.reserveCapacity(targetSize) }  // no doubling past a pack
        let base = Int64(buffer.count)
        buffer.append(contentsOf: stored)
        open[entry.sha256] = (base, entry)
        members.append((index, entry, base))
        if buffer.count >= targetSize { try close() }
    }

    /// Writes the open pack, if it holds anything.
    func close() throws(PatchSyncError) {
        guard !buffer.isEmpty else { return }
        let hash = buffer.withUnsafeBytes { SHA256Hasher.hash($0) }
        let temp = OriginLayout(root: origin).incomingPack(UInt64.random(in: 0...UInt64.max))
        do {
            let output = try FileDescriptor(path: temp, flags: O_WRONLY | O_CREAT | O_EXCL, mode: 0o644)
            try output.write(buffer)
        } catch {
            try? FileSystem.remove(temp)
            throw PatchSyncError.wrap(error).during("writing a pack of small files")
        }
        let pending = ObjectWriter.Pending(temp: temp, final: OriginLayout(root: origin).objectFile(hash))
        placer.add(pending)
        for member in members {
            var entry = member.entry
            entry.object = hash
            entry.chunks = entry.chunks.map { chunk in
                var chunk = chunk
                if chunk.object == nil { chunk.objectOffset += member.base }  // not one an earlier build stored
                return chunk
            }
            // A journal line describes a file whose chunks are all in the pack (what recovery reads back).
            if closed[entry.sha256] == nil && entry.isWhole {
                journal?.record(
                    pending, sha256: entry.sha256, object: hash, size: entry.size, chunks: entry.chunks,
                    packLength: Int64(buffer.count))
            }
            if closed[entry.sha256] == nil { closed[entry.sha256] = Placement(object: hash, chunks: entry.chunks) }
            finished.append((member.index, entry))
        }
        packsWritten += 1
        bytesWritten += Int64(buffer.count)
        buffer.removeAll(keepingCapacity: true)
        members = []
        open = [:]
    }

    /// The entries whose packs are written since the last call.
    func takeFinished() -> [(index: Int, entry: FileEntry)] {
        defer { finished = [] }
        return finished
    }

    /// `entry` placed where the same content is: in `object`, as `chunks`.
    private static func placing(_ entry: FileEntry, object: SHA256Digest, chunks: [ChunkEntry]) -> FileEntry {
        var entry = entry
        entry.object = object
        entry.chunks = chunks
        return entry
    }
}
