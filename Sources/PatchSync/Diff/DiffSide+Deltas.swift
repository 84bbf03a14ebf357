import Foundation

extension DiffSide {
    /// Per path, the file's share of the delta pack that a player on `old` fetches for `new` (its
    /// instructions' part of the pack's length). When `new` is a build folder and `old` a delta source
    /// (a build folder, or a `file://` origin's build among the delta sources), the pack is the one a
    /// publish of `new` would write from `old`: chosen and encoded the same way (``DeltaPackEncoder``),
    /// written nowhere. Otherwise it is the pack that `new`'s origin already has from `old`'s build
    /// (``deltaShares(new:newSpec:old:)``). Empty when a player on `old` gets no pack.
    public static func deltaShares(from old: DiffSide, to new: DiffSide) async throws(PatchSyncError) -> [String: Int64]
    {
        if let folder = new.buildFolder, let content = old.content {
            return try predictedShares(
                from: old.manifest, reading: content, to: new.manifest, targets: BuildFolderReader(directory: folder))
        }
        // A build of another channel, promoted onto old's: `repo promote` writes the pack from old's build.
        if new.manifest.channel != old.manifest.channel, let content = old.content, let objects = new.objects {
            return try predictedShares(from: old.manifest, reading: content, to: new.manifest, targets: objects)
        }
        return try await deltaShares(new: new.manifest, newSpec: new.spec, old: old.manifest)
    }

    /// What a player on `old` fetches before any content once `new` (a build folder) is published on
    /// `old`'s channel: the new manifest, or its delta from `old`'s when publish would write one, and,
    /// for an origin's build, the signed metadata again (about 1 KiB more targets for the new entry).
    /// The manifest is the one publish would write: files `old` has keep its objects and layout, a delta
    /// pack from `old` is listed when `packBytes` > 0. Nil unless `new` is a build folder.
    public static func predictedMetadataBytes(
        from old: DiffSide, to new: DiffSide,
        packBytes: Int64
    ) throws(PatchSyncError) -> Int64? {
        guard new.buildFolder != nil else { return nil }
        let layouts = Dictionary(old.manifest.files.map { ($0.sha256, $0) }, uniquingKeysWith: { a, _ in a })
        var manifest = new.manifest
        manifest.buildId = old.manifest.buildId
        manifest.channel = old.manifest.channel
        manifest.sequence = old.manifest.sequence + 1
        manifest.formatVersion = old.manifest.formatVersion
        for index in manifest.files.indices {
            guard let known = layouts[manifest.files[index].sha256] else { continue }
            manifest.files[index].object = known.object
            manifest.files[index].chunks = known.chunks
        }
        if packBytes > 0 {
            manifest.deltas = [
                DeltaSource(
                    from: old.manifest.buildId, object: SHA256Hasher.hash(Data()), length: packBytes,
                    files: 0)
            ]
        }
        let json = try manifest.encoded()
        let manifestBytes =
            Publisher.manifestDelta(from: try old.manifest.encoded(), to: json).map { Int64($0.stored.count) }
            ?? Int64(Manifest.pack(json).count)
        return manifestBytes + (old.signedMetadataBytes.map { $0 + 1024 } ?? 0)
    }

    /// For NEW read from an origin URL whose manifest has a delta pack from OLD's build: per path, that
    /// file's share of the pack. Empty otherwise. The pack is checked against the SHA-256 that NEW's
    /// verified manifest gives.
    public static func deltaShares(new: Manifest, newSpec: String, old: Manifest) async throws(PatchSyncError)
        -> [String: Int64]
    {
        let lower = newSpec.lowercased()
        guard lower.hasPrefix("http://") || lower.hasPrefix("https://") || lower.hasPrefix("file://"),
            let pack = new.deltas?.first(where: { $0.from == old.buildId })
        else { return [:] }
        let base = String(newSpec.split(separator: "#", maxSplits: 1)[0])
        let temp = NSTemporaryDirectory() + "patchsync-diff-\(UUID().uuidString)/pack"
        defer { try? FileSystem.removeTree(FileSystem.parent(of: temp)) }
        let origin = try Origin(mirrors: [base], client: try HTTPClient())
        _ = try await origin.download(
            ObjectNaming(format: new.formatVersion).path(pack.object), to: temp, length: pack.length,
            sha256: pack.object)
        var sizes: [(path: String, bytes: Int64)] = []
        let input: FileDescriptor
        do { input = try FileDescriptor(path: temp, flags: O_RDONLY) } catch { throw PatchSyncError.wrap(error) }
        try DeltaPack.read(input) { (index, instructions) throws(PatchSyncError) in
            guard new.files.indices.contains(index) else { return }
            sizes.append((path: new.files[index].path, bytes: Int64(instructions.count)))
        }
        return shares(sizes, of: pack.length)
    }

    /// The shares of the pack that a publish of a build folder, or a promote of an origin's build
    /// (described by `new`, whose files `targets` reads), would write from `old`, whose files `content` reads. The pack goes to /dev/null: only its length is kept.
    static func predictedShares(
        from old: Manifest, reading content: any FileContentSource, to new: Manifest,
        targets: any FileContentSource
    ) throws(PatchSyncError) -> [String: Int64] {
        let encoder = DeltaPackEncoder(source: old, sourceFiles: content, targetFiles: targets)
        let candidates = encoder.candidates(for: new.files)
        guard !candidates.isEmpty else { return [:] }
        do {
            var writer = try DeltaPack.Writer(
                writingTo: try FileDescriptor(path: "/dev/null", flags: O_WRONLY),
                codec: DeltaPack.codec(for: new.files))
            let appended = try encoder.append(candidates, of: new.files, to: &writer)
            _ = try writer.finish()
            return shares(appended.map { (path: new.files[$0.index].path, bytes: Int64($0.bytes)) }, of: writer.length)
        } catch {
            throw PatchSyncError.wrap(error).during("computing the delta pack from \(old.buildId)")
        }
    }

    /// Splits a pack's `length` among its files in proportion to their instructions' bytes, so that the
    /// shares add up to the length (the pack's headers and compression spread over its files).
    static func shares(_ sizes: [(path: String, bytes: Int64)], of length: Int64) -> [String: Int64] {
        let total = sizes.reduce(Int64(0)) { $0 + $1.bytes }
        guard total > 0 else { return [:] }
        var result: [String: Int64] = [:]
        var bytesSoFar: Int64 = 0, given: Int64 = 0
        for (path, bytes) in sizes {
            bytesSoFar += bytes
            let upTo = Int64((Double(bytesSoFar) / Double(total) * Double(length)).rounded())
            result[path, default: 0] += upTo - given
            given = upTo
        }
        return result
    }
}
