import Foundation
import Synchronization

extension Publisher {
    /// What one delta pack holds.
    public struct DeltaReport: Sendable, Codable {
        public var from: String
        public var files: Int
        public var bytes: Int64
    }

    /// A recent build of the channel that the new one gets deltas from: its manifest, and that
    /// manifest's JSON as the origin serves it (the source of the manifest delta).
    struct DeltaBase {
        /// The manifest's target path.
        var path: String
        var manifest: Manifest
        var json: Data
    }

    /// The channel's latest builds before `sequence` (up to ``Options/deltaSources``), each read once.
    func deltaBases(_ repo: Repository, sequence: Int) throws(PatchSyncError) -> [DeltaBase] {
        try Self.deltaBases(
            repo, origin: options.origin, channel: options.channel.name, before: sequence,
            excluding: options.buildId.value,
            count: options.deltaSources, skipped: skipped)
    }

    /// The latest `count` builds of `channel` before `sequence`, other than `buildId`, each read once. A
    /// base clients would refuse is reported to `skipped` and left out: no delta from it, never a wedged command.
    static func deltaBases(
        _ repo: Repository, origin: String, channel: String, before sequence: Int, excluding buildId: String?,
        count: Int,
        skipped: SkippedManifests
    ) throws(PatchSyncError) -> [DeltaBase] {
        guard count > 0 else { return [] }
        var bases: [DeltaBase] = []
        for (path, hash) in deltaSourceTargets(
            repo.targetFiles, channel: channel, before: sequence, excluding: buildId, count: count)
        {
            let file = OriginLayout(root: origin).path(OriginLayout.targetFile(path, sha256: hash))
            do {
                let json = try Manifest.unpack(try FileSystem.read(file, limit: 256 << 20), what: file)
                bases.append(DeltaBase(path: path, manifest: try Manifest.decode(json, what: file), json: json))
            } catch {
                skipped.add(path, error)  // refused by clients, or its file damaged or deleted by hand
            }
        }
        return bases
    }

    /// The targets of the builds that a build published on `channel` gets delta packs from: the channel's
    /// latest `count` by sequence before `sequence`, other than `buildId` itself; newest first, each with
    /// its manifest's SHA-256. Publish reads their manifests; `diff` asks whether OLD is among them.
    static func deltaSourceTargets(
        _ targets: [String: TargetFile], channel: String, before sequence: Int = .max,
        excluding buildId: String? = nil, count: Int
    ) -> [(path: String, sha256: String)] {
        var sources: [(sequence: Int, path: String, sha256: String)] = []
        for (path, target) in targets {
            guard let info = target.custom, info.channel == channel, info.sequence < sequence, info.preload == nil,
                info.buildId != buildId, let hash = target.hashes["sha256"]
            else { continue }
            sources.append((sequence: info.sequence, path: path, sha256: hash))
        }
        return sources.sorted { $0.sequence > $1.sequence }.prefix(max(0, count)).map {
            (path: $0.path, sha256: $0.sha256)
        }
    }

    /// One delta pack per base, each holding a delta for every file that changed at the same path and
    /// whose delta costs less than its new chunks.
    /// Each pack is written into `root`'s objects (the origin's, or a preload's folder to seal from),
    /// with the indices of the files it rebuilds.
    func deltaPacks(
        for files: [FileEntry], from bases: [DeltaBase],
        into root: String
    ) throws(PatchSyncError) -> [(source: DeltaSource, files: [Int])] {
        try Self.deltaPacks(
            for: files, from: bases, into: root, origin: options.origin,
            targetFiles: BuildFolderReader(directory: options.buildDirectory))
    }

    /// ``deltaPacks(for:from:into:)`` with the source builds' objects in `origin` and the new files read
    /// by `targetFiles`: the build folder for publish, the published objects for promote.
    /// `format`: the target manifest's; below 8 (a build relisted by promote or rollback) its deltas are
    /// what a client of that format reads: same path only, never a zstd frame.
    static func deltaPacks(
        for files: [FileEntry], from bases: [DeltaBase], into root: String, origin: String,
        targetFiles: any FileContentSource, format: Int = Manifest.formatVersion
    ) throws(PatchSyncError) -> [(source: DeltaSource, files: [Int])] {
        var packs: [(source: DeltaSource, files: [Int])] = []
        let codec = DeltaPack.codec(for: files)
        for base in bases {
            let encoder = DeltaPackEncoder(
                source: base.manifest,
                sourceFiles: ObjectReader(origin: origin, naming: ObjectNaming(format: base.manifest.formatVersion)),
                targetFiles: targetFiles, acrossFiles: format >= 8)
            if let pack = try deltaPack(encoder, to: files, into: root, codec: codec) { packs.append(pack) }
        }
        return packs
    }

    /// A manifest delta: what a player on the base's build fetches instead of the whole manifest.
    struct ManifestDeltaBytes {
        /// The stored delta, and the length it inflates to (the instructions, or for zstd the manifest).
        var stored: Data
        var size: Int
        /// nil: our delta instructions, deflated; `zstd`: a zstd frame with the base's encoded manifest
        /// as its prefix (``ManifestDelta/codec``).
        var codec: String?
    }

    /// The delta of the encoded manifest `encoded` from `base`, or nil when it would not cost less than
    /// half the manifest. Between two binary manifests it is zstd's prefix mode (on Wesnoth's and
    /// SuperTuxKart's manifests 0.57× and 0.67× the size of our delta instructions); between two JSON
    /// manifests our delta instructions; between two encodings, none.
    static func manifestDelta(from base: Data, to encoded: Data) -> ManifestDeltaBytes? {
        let binary = (base.withUnsafeBytes(ManifestBinary.isBinary), encoded.withUnsafeBytes(ManifestBinary.isBinary))
        let delta: ManifestDeltaBytes
        switch binary {
        case (true, true):
            // Level 19 up to 8 MiB (Wesnoth's 3.8 MB: 0.85 s); above, 12 (200,000 files' 36 MB: 0.6 s for a
            // delta 1.1× the size of 19's, which takes 14 s).
            let level: Int32 = encoded.count <= 8 << 20 ? 19 : 12
            let frame = base.withUnsafeBytes { b in
                encoded.withUnsafeBytes { Zstd.compress($0, prefix: b, level: level) }
            }
            delta = ManifestDeltaBytes(stored: Data(frame), size: encoded.count, codec: "zstd")
        case (false, false):
            let instructions = base.withUnsafeBytes { o in
                encoded.withUnsafeBytes { DeltaEncoder(source: o).encode(target: $0) }
            }
            let stored = Data(instructions.withUnsafeBytes { Zlib.deflate($0, level: 9) })
            delta = ManifestDeltaBytes(stored: stored, size: instructions.count, codec: nil)
        default:
            return nil
        }
        return delta.stored.count < encoded.count / 2 ? delta : nil  // else not worth a second path
    }

    /// The pack of `encoder` to `files`, written into `root`; nil when no file gains from a delta.
    private static func deltaPack(
        _ encoder: DeltaPackEncoder, to files: [FileEntry], into root: String, codec: ObjectCodec
    ) throws(PatchSyncError) -> (source: DeltaSource, files: [Int])? {
        let source = encoder.source
        let candidates = encoder.candidates(for: files)
        guard !candidates.isEmpty else { return nil }
        let layout = OriginLayout(root: root)
        let temp = layout.incomingDeltaPack(UInt64.random(in: 0...UInt64.max))
        do {
            try FileSystem.makeDirectory(layout.incomingFolder)
            let output = try FileDescriptor(path: temp, flags: O_WRONLY | O_CREAT | O_EXCL, mode: 0o644)
            var writer = try DeltaPack.Writer(writingTo: output, codec: codec)
            let appended = try encoder.append(candidates, of: files, to: &writer)
            let sources = Dictionary(candidates.map { ($0.index, $0.old.path) }, uniquingKeysWith: { a, _ in a })
            var moved: [String: String] = [:]
            for entry in appended where sources[entry.index] != files[entry.index].path {
                moved[files[entry.index].path] = sources[entry.index]
            }
            let sha = try writer.finish()
            // A pack over an object's cap is left out: no CDN would cache it (players fetch chunks).
            guard writer.files > 0, writer.length <= ObjectNaming.segmentBytes else {
                try FileSystem.remove(temp)
                return nil
            }
            try output.sync()
            try ObjectWriter.place(temp, as: layout.objectFile(sha))
            return (
                DeltaSource(
                    from: source.buildId, object: sha, length: writer.length, files: writer.files,
                    covers: appended.map(\.index).sorted(), moved: moved.isEmpty ? nil : moved),
                appended.map(\.index)
            )
        } catch {
            try? FileSystem.remove(temp)
            throw PatchSyncError.wrap(error).during("writing the delta pack from build \(source.buildId)")
        }
    }
}

/// The delta pack from one build to the files of a build folder: a delta for every file that changed at
/// the same path, when both versions are at most ``maxFileBytes`` and the delta, deflated, costs less than
/// the file's chunks that the source build lacks. One choice for both uses: publish writes the pack into
/// the origin; `diff` writes it to /dev/null, for its length and each file's part of it.
struct DeltaPackEncoder: Sendable {
    /// Files larger than this get no delta (the encoder holds the source in memory): they go by chunks.
    static let maxFileBytes: Int64 = 256 << 20
    /// Files encoded at once, in parallel; bounds the deltas held before they go into the pack.
    static let batch = 64

    /// A file that may gain from a delta: its index in the target files, its entry in the source build,
    /// and the stored bytes of its chunks that the source build lacks.
    struct Candidate: Sendable {
        var index: Int
        var old: FileEntry
        var cost: Int64
    }

    /// The build the deltas start from.
    let source: Manifest
    /// Reads the source build's files.
    let sourceFiles: any FileContentSource
    /// Reads the files the deltas lead to: a build folder, or the objects of a published build (promote).
    let targetFiles: any FileContentSource
    /// Sources at other paths and zstd frames (manifest format 8); without, what older clients read.
    var acrossFiles = true

    /// The files of `files` that changed at the same path, or are new and have a file of the same name
    /// elsewhere in the source build (the one closest in size), within the size limits, and have chunks
    /// the source build lacks.
    func candidates(for files: [FileEntry]) -> [Candidate] {
        let sources = DeltaSourceIndex(source)
        let have = Set(source.files.lazy.flatMap { $0.chunks.map(\.sha256) })
        var candidates: [Candidate] = []
        for (index, file) in files.enumerated() {
            guard let old = sources.source(for: file, acrossFiles: acrossFiles), old.sha256 != file.sha256,
                old.size > 0,
                file.size > 0,
                old.size <= Self.maxFileBytes, file.size <= Self.maxFileBytes
            else { continue }
            let cost = file.chunks.reduce(Int64(0)) { $0 + (have.contains($1.sha256) ? 0 : Int64($1.objectLength)) }
            if cost > 0 { candidates.append(Candidate(index: index, old: old, cost: cost)) }
        }
        return candidates
    }

    /// Encodes the deltas of `candidates` (of `files`), ``batch`` at a time, and appends each that pays to
    /// `writer`, in order; returns the index and the instructions' bytes of each file appended.
    func append(
        _ candidates: [Candidate], of files: [FileEntry],
        to writer: inout DeltaPack.Writer
    ) throws(PatchSyncError) -> [(index: Int, bytes: Int)] {
        var appended: [(index: Int, bytes: Int)] = []
        for start in stride(from: 0, to: candidates.count, by: Self.batch) {
            let batch = Array(candidates[start..<min(start + Self.batch, candidates.count)])
            let deltas = try encode(batch, of: files, codec: writer.codec)
            for (candidate, delta) in zip(batch, deltas) {
                guard let delta else { continue }
                do { try writer.append(file: candidate.index, instructions: delta) } catch {
                    throw PatchSyncError.wrap(error)
                }
                appended.append((index: candidate.index, bytes: delta.count))
            }
        }
        return appended
    }

    /// The instructions of each candidate's delta, nil where the delta (compressed at the fast level of
    /// the pack's codec, a bound on what the pack stores) would not cost less than the file's new
    /// chunks, or is over ``DeltaPack/maxDeltaBytes``; encoded on every core.
    private func encode(_ batch: [Candidate], of files: [FileEntry], codec: ObjectCodec) throws(PatchSyncError)
        -> [[UInt8]?]
    {
        let work = batch.map { (file: files[$0.index], old: $0.old, cost: $0.cost) }
        let estimate = codec.kind == .zstd ? ObjectCodec.default : .deflate
        let results = Mutex<[Result<[UInt8]?, PatchSyncError>?]>(Array(repeating: nil, count: work.count))
        DispatchQueue.concurrentPerform(iterations: work.count) { i in
            let (file, old, cost) = work[i]
            let result = Result { () throws(PatchSyncError) -> [UInt8]? in
                let (delta, packed) = try self.delta(of: file, from: old, codec: estimate)
                guard delta.count <= DeltaPack.maxDeltaBytes else { return nil }
                return Int64(packed) < cost ? delta : nil
            }
            results.withLock { $0[i] = result }
        }
        var deltas: [[UInt8]?] = []
        for result in results.withLock({ $0 }) {
            guard let result else { throw PatchSyncError(.internal, "a delta was not computed") }
            deltas.append(try result.get())
        }
        return deltas
    }

    /// The delta of the target build's `file` from the source build's `old`.
    /// The better of two deltas of `file` from `old`: our instructions (``Delta``), or for a file of at
    /// most ``DeltaPack/maxZstdDeltaBytes`` a zstd frame with the old file as its prefix (`zstd
    /// --patch-from`, level 9) when it is smaller (for a file under 1 MiB, under half their size).
    /// Returns the delta and what it takes compressed with `codec` (a bound on what the pack stores).
    private func delta(of file: FileEntry, from old: FileEntry, codec: ObjectCodec) throws(PatchSyncError)
        -> (delta: [UInt8], packed: Int)
    {
        let original = UnsafeMutableRawBufferPointer.allocate(byteCount: Int(old.size), alignment: 16)
        defer { original.deallocate() }
        try sourceFiles.content(of: old, into: original)
        let target = UnsafeMutableRawBufferPointer.allocate(byteCount: Int(file.size), alignment: 16)
        defer { target.deallocate() }
        try targetFiles.content(of: file, into: target)
        let ours = DeltaEncoder(source: UnsafeRawBufferPointer(original)).encode(target: UnsafeRawBufferPointer(target))
        // Instructions that start as a frame does would be read as one: never ours, then.
        let oursPacked = ours.starts(with: Zstd.magic) ? Int.max : ours.withUnsafeBytes { codec.compress($0).count }
        guard acrossFiles, file.size <= DeltaPack.maxZstdDeltaBytes, old.size <= DeltaPack.maxZstdDeltaBytes,
            codec.kind == .zstd
        else { return (ours, oursPacked) }
        let frame = Zstd.compress(UnsafeRawBufferPointer(target), prefix: UnsafeRawBufferPointer(original), level: 9)
        // For a small file only a clear win: small files' deltas compress together in the pack (Wesnoth's
        // many small edits look alike), which this count of one file alone does not see.
        let wins = frame.count < oursPacked && (file.size >= 1 << 20 || frame.count * 2 < oursPacked)
        return wins ? (frame, frame.count) : (ours, oursPacked)
    }
}

/// Reads files back out of the objects of an origin folder.
struct ObjectReader: FileContentSource {
    let origin: String

    /// How the manifest the files come from names its objects.
    var naming: ObjectNaming = .current

    /// Inflates the chunks of `file`'s object into `buffer` (exactly the file's size), checking each chunk's hash.
    func content(of file: FileEntry, into buffer: UnsafeMutableRawBufferPointer) throws(PatchSyncError) {
        let object = StoredObject(origin: OriginLayout(root: origin), object: file.object, naming: naming)
        do { try object.read(file, into: buffer) } catch {
            throw PatchSyncError(
                .localIO, "object \(file.object) of \(file.path) in \(origin) is damaged or missing: \(error)",
                remedy: "publish the build it belongs to again, or give it no delta with --delta-sources 0")
        }
    }
}
