import Foundation

/// Turns a file into an object: its content-defined chunks, each compressed (zstd by default, or
/// deflate; stored raw when compression does not pay), concatenated, named by the
/// file's SHA-256, written under a temporary name and renamed into place. An object whose stored bytes
/// outgrow ``ObjectNaming/segmentBytes`` goes on in its next segment file (``ObjectNaming``).
struct ObjectWriter: Sendable {
    /// Deflate must save at least this fraction of a chunk, or it is stored raw.
    static let minimumSaving = 0.03

    let chunker: Chunker
    /// How chunks are compressed (each chunk that compression does not pay is stored raw).
    var codec: ObjectCodec = .default
    /// The origin root; objects go to `objects/…` inside it.
    let origin: String
    /// Whether an object over ``ObjectNaming/segmentBytes`` goes on in segment files (false for a
    /// preload's plain objects, which are sealed whole).
    var segmented = true
    /// Where each finished object is recorded, for the next publish after a kill (``LayoutJournal``).
    var journal: LayoutJournal? = nil
    /// Whether the object file at a path reads back, chunk by chunk, as a layout (the publisher's check):
    /// an object already there that does is reused, never written again.
    var readsBack: (@Sendable (String, FileEntry) -> Bool)? = nil
    /// Where a chunk an earlier build stored already sits (its entry with `object` set), or nil: a file
    /// written with this writes only its new chunks (format 7), unless that would leave it in more than
    /// ``Fragmentation/maxRanges(storedBytes:)`` ranges; then it is stored whole again.
    var storedChunks: (@Sendable (SHA256Digest) -> ChunkEntry?)? = nil
    /// How scattered a file's chunks may be before it is stored whole again.
    var fragmentation = Fragmentation.standard

    /// What writing one file produced.
    struct Result {
        var sha256: SHA256Digest
        /// The object's name: the file's SHA-256, or its layout's name when that one is taken.
        var object: SHA256Digest
        var size: Int64
        var chunks: [ChunkEntry]
        /// The bytes of the object (written by ``write(file:knownHash:)``; what it would be for
        /// ``describe(file:)``).
        var bytesWritten: Int64
        /// Chunks left where an earlier build stored them (``storedChunks``), and their stored bytes.
        var reusedChunks = 0
        var reusedBytes: Int64 = 0
        /// Whether the file's chunks would have been scattered over too many ranges, so it was stored whole.
        var consolidated = false
        /// The unsynced temporary files to place at the object's segment paths (none from ``describe(file:)``).
        var pending: [Pending] = []
    }

    /// Where a file's bytes come from: read from its descriptor as chunked, or already in memory (a
    /// publish that hashed the file first reads it once: ``Publisher``).
    enum Input {
        case file(FileDescriptor)
        case bytes(UnsafeRawBufferPointer)
    }

    /// A written object not yet in place: ``ObjectPlacer`` syncs and renames it with others.
    struct Pending: Sendable {
        var temp: String
        var final: String
    }

    /// Where a file's new stored bytes go.
    enum Destination: Equatable {
        /// An object of its own, in temporary segment files for ``ObjectPlacer`` (``Result/pending``).
        case object
        /// Memory, for a pack (``PackWriter``).
        case pack
        /// Memory while they stay within `limit` bytes and some chunks were stored before (a changed large
        /// file whose new chunks are few joins the publish's pack), else an object: one pass either way,
        /// the bytes collected so far going to the object's first segment when the limit is passed.
        case packUpTo(Int)
    }

    /// What storing a file produced: its stored bytes for a pack, or its object (written, or reused).
    enum Stored {
        case packed(Result, [UInt8])
        case written(Result)
    }

    /// Chunks and compresses `path` into `destination`, leaving where they are the chunks ``storedChunks``
    /// locates, unless that scatters the file (``Fragmentation/allows(_:)``): then it is stored whole again,
    /// a second pass. The caller decides that the content is to be stored: content a manifest describes is
    /// reused, never written again. `knownHash` is the file's SHA-256 when the caller already computed it.
    func store(
        file path: String, knownHash: SHA256Digest? = nil, bytes: UnsafeRawBufferPointer? = nil,
        into destination: Destination
    ) throws(PatchSyncError) -> Stored {
        let segments = SegmentFiles(layout: OriginLayout(root: origin))
        do {
            func input() throws(Errno) -> Input {
                if let bytes { return .bytes(bytes) }
                return .file(try FileDescriptor(path: path, flags: O_RDONLY))
            }
            var collected: [UInt8]? = destination == .object ? nil : []
            var spill: Int? = nil
            // The collected bytes must fit the first segment when they spill over.
            if case .packUpTo(let limit) = destination { spill = min(limit, Int(ObjectNaming.segmentBytes / 2)) }
            var result = try store(
                try input(), into: segments, knownHash: knownHash, collecting: &collected, reusing: storedChunks,
                spillingAt: spill)
            if result.reusedChunks > 0, !fragmentation.allows(result.chunks) {
                // Too scattered for a fresh install to read in few requests: stored whole again.
                // A file for a pack goes into it whole; any other into an object of its own.
                segments.removeAll()
                collected = destination == .pack ? [] : nil
                result = try store(try input(), into: segments, knownHash: result.sha256, collecting: &collected)
                result.consolidated = true
            }
            if let bytes = collected {
                if destination == .pack || result.reusedChunks > 0 { return .packed(result, bytes) }
                try segments.write(bytes)  // new content: an object named by the file, as any large file's
            }
            return .written(try place(result, segments: segments))
        } catch {
            segments.removeAll()
            throw PatchSyncError.wrap(error).during("storing \(path)")
        }
    }

    /// Names the written object and lists its temporary segment files (``Result/pending``).
    private func place(_ stored: Result, segments: SegmentFiles) throws(Errno) -> Result {
        var result = stored
        if result.reusedChunks > 0 { return try finishPartial(result, segments: segments) }
        let naming = ObjectNaming.current, layout = OriginLayout(root: origin)
        // A name never changes its bytes: when the file's own name is taken (a leftover of a pruned build,
        // written with another codec or level; the same content stored a moment ago), an object that reads
        // back as this layout is reused as it is; otherwise the object is named by its layout instead
        // (``layoutName(of:chunks:)``), and never renamed over what is there.
        for candidate in [result.sha256, Self.layoutName(of: result.sha256, chunks: result.chunks)] {
            result.object = candidate
            let first = layout.path(naming.path(candidate, segment: 0))
            guard FileSystem.exists(first) else { break }
            let entry = FileEntry(
                path: "", size: result.size, mode: 0o644, sha256: result.sha256, object: candidate, bundle: "",
                chunks: result.chunks)
            if segments.temps.count == 1, let readsBack, readsBack(first, entry) {
                segments.removeAll()
                result.bytesWritten = 0
                return result
            }
        }
        let object = result.object
        result.pending = segments.temps.enumerated().map { k, temp in
            Pending(temp: temp, final: layout.path(naming.path(object, segment: k)))
        }
        // A journal line names one temporary file: an object of several segments is written again after a kill.
        if result.pending.count == 1 {
            journal?.record(
                result.pending[0], sha256: result.sha256, object: object, size: result.size, chunks: result.chunks)
        }
        return result
    }

    /// A file some of whose chunks stay where earlier builds stored them: its new chunks (if any) form an
    /// object of their own, named by its layout (``layoutName(of:chunks:)``, which names every chunk's
    /// object); with none, the file's object is its first chunk's. Chunks in the file's object name none.
    private func finishPartial(_ stored: Result, segments: SegmentFiles) throws(Errno) -> Result {
        var result = stored
        let fresh = result.chunks.contains { $0.object == nil }
        result.object =
            fresh
            ? Self.layoutName(of: result.sha256, chunks: result.chunks)
            : result.chunks.first?.object ?? result.sha256
        for index in result.chunks.indices where result.chunks[index].object == result.object {
            result.chunks[index].object = nil
        }
        guard fresh else {
            segments.removeAll()
            result.bytesWritten = 0
            return result
        }
        let naming = ObjectNaming.current, layout = OriginLayout(root: origin), object = result.object
        // Same name, same layout: an object already there reads back as this one, and is replaced as it is.
        result.pending = segments.temps.enumerated().map { k, temp in
            Pending(temp: temp, final: layout.path(naming.path(object, segment: k)))
        }
        return result
    }

    /// The name of an object of file content `sha256` stored as `chunks`: any bytes ever written under it
    /// read back as this content through this layout (the same chunks at the same stored offsets, lengths
    /// and codecs), so a CDN copy of an earlier write of it is as good as this one.
    static func layoutName(of sha256: SHA256Digest, chunks: [ChunkEntry]) -> SHA256Digest {
        var text = "patchsync object layout 1\0\(sha256.hex)"
        for chunk in chunks {
            text +=
                "\0\(chunk.offset),\(chunk.length),\(chunk.sha256.hex),\(chunk.objectOffset),\(chunk.objectLength),\(chunk.codec.rawValue)"
            if let object = chunk.object { text += ",\(object.hex)" }  // format 7: stored elsewhere
        }
        return SHA256Hasher.hash(Data(text.utf8))
    }

    /// The temporary files of one object's segments, each made when the first chunk reaches it, spread
    /// over 16 folders (threads creating files in one folder wait for its lock).
    final class SegmentFiles {
        let layout: OriginLayout
        private(set) var temps: [String] = []
        private var current: FileDescriptor?

        init(layout: OriginLayout) { self.layout = layout }

        @discardableResult
        func next() throws(Errno) -> FileDescriptor {
            let temp = layout.incomingObject(UInt64.random(in: 0...UInt64.max))
            let file = try FileDescriptor(path: temp, flags: O_WRONLY | O_CREAT | O_EXCL, mode: 0o644)
            current = file
            temps.append(temp)
            return file
        }

        /// The segment being written, the first one opened when there is none yet.
        private func open() throws(Errno) -> FileDescriptor {
            if let current { return current }
            return try next()
        }

        func write(_ bytes: UnsafeRawBufferPointer) throws(Errno) { try open().write(bytes) }

        func write(_ bytes: [UInt8]) throws(Errno) { try open().write(bytes) }

        /// Removes every segment written so far; a later write starts a new first segment.
        func removeAll() {
            for temp in temps { try? FileSystem.remove(temp) }
            temps = []
            current = nil
        }
    }

    /// Makes the folders that ``write(file:knownHash:)`` writes temporary files to; once per publish.
    static func prepare(origin: String) throws(Errno) {
        let layout = OriginLayout(root: origin)
        for folder in 0..<OriginLayout.incomingSpread { try FileSystem.makeDirectory(layout.incomingSubfolder(folder)) }
    }

    /// Whether deflating `bytes` may pay: false when fast deflate (level 1) of two samples (the start and
    /// the middle) saves under ``minimumSaving`` of each, as with audio, images and other packed data.
    /// Full deflate (level 6) of incompressible data costs several times the samples' deflate.
    static func mayCompress(_ bytes: UnsafeRawBufferPointer) -> Bool {
        let sample = 8 << 10
        guard bytes.count >= 4 * sample else { return true }
        for start in [0, bytes.count / 2] {
            let piece = UnsafeRawBufferPointer(rebasing: bytes[start..<(start + sample)])
            if Double(Zlib.deflate(piece, level: 1).count) <= Double(sample) * (1 - minimumSaving) { return true }
        }
        return false
    }

    /// Renames a synced temporary file to its object path and syncs the folder.
    static func place(_ temp: String, as final: String) throws(Errno) {
        let dir = FileSystem.parent(of: final)
        try FileSystem.makeDirectory(dir)
        try FileSystem.rename(temp, final)
        try FileSystem.syncDirectory(dir)
    }

    /// Chunks and compresses `path` as `write(file:)` would, writing nothing: what its object would be.
    func describe(file path: String) throws(PatchSyncError) -> Result {
        do { return try store(.file(try FileDescriptor(path: path, flags: O_RDONLY)), into: nil, knownHash: nil) } catch
        {
            throw PatchSyncError.wrap(error).during("reading \(path)")
        }
    }

    private func store(
        _ input: Input, into output: SegmentFiles?,
        knownHash: SHA256Digest?
    ) throws(PatchSyncError) -> Result {
        var none: [UInt8]? = nil
        return try store(input, into: output, knownHash: knownHash, collecting: &none)
    }

    /// Stored bytes go to `collected` while it is non-nil, else to `output`; past `spillingAt` bytes what
    /// was collected goes to `output` (its first segment: the limit is under one) and the rest follows it.
    /// `reusing`: a chunk it locates is not written; its entry names where it is.
    private func store(
        _ input: Input, into output: SegmentFiles?, knownHash: SHA256Digest?,
        collecting collected: inout [UInt8]?, reusing: (@Sendable (SHA256Digest) -> ChunkEntry?)? = nil,
        spillingAt limit: Int? = nil
    ) throws(PatchSyncError) -> Result {
        let fileHasher = knownHash == nil ? SHA256Hasher() : nil
        var chunks: [ChunkEntry] = []
        var objectOffset: Int64 = 0
        let each = { (bytes: UnsafeRawBufferPointer, offset: Int64) throws(PatchSyncError) in
            fileHasher?.update(bytes)
            let chunkSha = SHA256Hasher.hash(bytes)
            if let reusing, var at = reusing(chunkSha), at.length == bytes.count, at.object != nil {
                at.offset = offset
                chunks.append(at)
                return
            }
            let packed = Self.mayCompress(bytes) ? codec.compress(bytes) : []
            let compressed = !packed.isEmpty && Double(packed.count) <= Double(bytes.count) * (1 - Self.minimumSaving)
            let stored = compressed ? packed.count : bytes.count
            // Where the chunk goes in the object's segments (never in a pack's bytes: packs stay under one).
            if segmented, collected == nil {
                let (at, opens) = ObjectNaming.place(after: objectOffset, stored: Int64(stored))
                objectOffset = at
                if opens { do { try output?.next() } catch { throw PatchSyncError.wrap(error) } }
            }
            do {
                if collected != nil {
                    if compressed {
                        collected?.append(contentsOf: packed)
                    } else {
                        collected?.append(contentsOf: bytes)
                    }
                    try Self.spill(&collected, to: output, past: limit)
                } else if compressed {
                    try output?.write(packed)
                } else {
                    try output?.write(bytes)
                }
            } catch { throw PatchSyncError.wrap(error) }
            chunks.append(
                ChunkEntry(
                    offset: offset, length: bytes.count, sha256: chunkSha,
                    objectOffset: objectOffset, objectLength: stored,
                    codec: compressed ? codec.chunkCodec : .raw))
            objectOffset += Int64(stored)
        }
        switch input {
        case .file(let descriptor): try chunker.forEachChunk(of: descriptor, each)
        case .bytes(let bytes): try chunker.forEachChunk(of: bytes, each)
        }
        let size = chunks.last.map { $0.offset + Int64($0.length) } ?? 0
        guard let sha = knownHash ?? fileHasher?.finish() else { throw PatchSyncError(.internal, "no file hash") }
        let reused = chunks.filter { $0.object != nil },
            stored = { (c: [ChunkEntry]) in
                c.reduce(Int64(0)) { $0 + Int64($1.objectLength) }
            }
        return Result(
            sha256: sha, object: sha, size: size, chunks: chunks, bytesWritten: stored(chunks) - stored(reused),
            reusedChunks: reused.count, reusedBytes: stored(reused))
    }

    /// Past `limit` bytes, what was collected goes to `output` and collecting stops.
    private static func spill(_ collected: inout [UInt8]?, to output: SegmentFiles?, past limit: Int?) throws(Errno) {
        guard let limit, let output, let bytes = collected, bytes.count > limit else { return }
        try output.write(bytes)
        collected = nil
    }
}
