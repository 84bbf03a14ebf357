import Foundation

extension Manifest {
    /// The largest manifest a client accepts once inflated.
    static let maximumInflatedSize = 512 << 20
    /// The most bundles a build has (a file names its bundle by a 16-bit index in the binary manifest).
    static let maximumBundles = 4096

    /// Refuses a manifest that could write outside the install or does not add up:
    /// unsafe or duplicate paths, special mode bits, chunks that do not tile their file.
    public func validate() throws(PatchSyncError) {
        guard (1...Manifest.formatVersion).contains(formatVersion) else {
            throw refusal(
                "has format version \(formatVersion); this client reads versions 1 to \(Manifest.formatVersion)",
                remedy: "update PatchSync to install this build")
        }
        try chunking.validate()
        let bundleNames = Set(bundles.map(\.name))
        guard bundleNames.count == bundles.count, (1...Manifest.maximumBundles).contains(bundles.count) else {
            throw refusal("has duplicate bundles, none, or more than \(Manifest.maximumBundles)")
        }
        var (paths, duplicate) = PathIndex.of(files: files.map(\.path))
        if let duplicate { throw refusal("lists \(duplicate) twice, or with another path that differs only in case") }
        // Sealed objects are fetched and opened whole (their plain bytes are never an origin file).
        let naming = ObjectNaming(format: formatVersion), sealedPlain = Set((sealed ?? []).map(\.object))
        for file in files {
            try Manifest.checkPath(file.path)
            guard bundleNames.contains(file.bundle) else {
                throw refusal("puts \(file.path) in unknown bundle \(file.bundle)")
            }
            guard file.mode & ~0o777 == 0, file.mode & 0o002 == 0 else {
                throw refusal(
                    "gives \(file.path) mode \(String(file.mode, radix: 8)); only permission bits, "
                        + "not world-writable, are allowed")
            }
            try checkChunks(of: file, segmented: naming.segmented && !sealedPlain.contains(file.object))
            try checkChunkObjects(of: file, sealedPlain: sealedPlain)
        }
        for link in links ?? [] {
            try checkEntry(link.path, bundle: link.bundle, leaf: true, &paths)
            guard LinkResolver.isUsableTarget(link.target) else {
                throw refusal("gives link \(link.path) the target '\(link.target)'; only relative targets are allowed")
            }
        }
        for folder in folders ?? [] { try checkEntry(folder.path, bundle: folder.bundle, leaf: false, &paths) }
        if let (path, prefix) = paths.firstFileAsFolder() {
            throw refusal(
                "has \(prefix) both as a file or link and as a folder of \(path) (or a path "
                    + "that differs from it only in case)")
        }
        if let links, !links.isEmpty {
            let resolver = LinkResolver(links: links)
            for link in links where !resolver.staysInside(link.path) {
                throw refusal("has link \(link.path) -> \(link.target), which resolves outside the build")
            }
        }
        try checkSealedAndDeltas()
    }

    /// The sealed objects' units add up to their length; each delta pack covers files of this build, in order.
    private func checkSealedAndDeltas() throws(PatchSyncError) {
        var sealedObjects = Set<SHA256Digest>()
        for object in sealed ?? [] {
            let layout = SealedLayout(units: object.units)
            guard sealedObjects.insert(object.object).inserted, !object.units.isEmpty,
                object.units.allSatisfy({ $0 >= 0 }),
                layout.sealedLength == object.length
            else {
                throw refusal("lists sealed object \(object.sealed) twice or with units that do not add up")
            }
        }
        for pack in deltas ?? [] {
            guard pack.from != buildId, pack.length > 0, pack.files > 0, pack.files <= files.count,
                pack.covers.map({ covers in
                    (covers.count == pack.files || pack.narrowed != nil)
                        && zip(covers, covers.dropFirst()).allSatisfy { $0 < $1 }
                        && covers.allSatisfy { files.indices.contains($0) }
                }) ?? true
            else {
                throw refusal("lists a delta pack from \(pack.from) that does not add up")
            }
            for (target, source) in pack.moved ?? [:] {
                guard formatVersion >= 8, PathRule.problem(target) == nil, PathRule.problem(source) == nil else {
                    throw refusal("lists a delta pack from \(pack.from) with a source path it cannot have")
                }
            }
        }
    }

    /// `segmented`: every chunk sits in one segment of its object (``ObjectNaming``).
    private func checkChunks(of file: FileEntry, segmented: Bool) throws(PatchSyncError) {
        var offset: Int64 = 0
        for chunk in file.chunks {
            guard chunk.offset == offset, chunk.length > 0, chunk.length <= chunking.maxSize,
                chunk.objectOffset >= 0, chunk.objectLength > 0,
                chunk.objectLength <= chunk.length + chunk.length / 8 + 64
            else {
                throw refusal("has a malformed chunk list for \(file.path) at offset \(offset)")
            }
            guard
                !segmented
                    || chunk.objectOffset / ObjectNaming.segmentBytes
                        == (chunk.objectOffset + Int64(chunk.objectLength) - 1) / ObjectNaming.segmentBytes
            else {
                throw refusal(
                    "has a chunk of \(file.path) at offset \(offset) that crosses a segment of object \(chunk.object(in: file))"
                )
            }
            guard chunk.codec != .zstd || formatVersion >= 5 else {
                throw refusal(
                    "has zstd chunks for \(file.path) under format version \(formatVersion), which has none (zstd came with 5)"
                )
            }
            offset += Int64(chunk.length)
        }
        guard offset == file.size else {
            throw refusal("lists chunks of \(file.path) that add up to \(offset) bytes, not \(file.size)")
        }
    }

    /// A chunk names an object of its own only from format 7, never a sealed one (fetched and opened whole,
    /// by its file), and never in a file whose own object is sealed.
    private func checkChunkObjects(of file: FileEntry, sealedPlain: Set<SHA256Digest>) throws(PatchSyncError) {
        guard !file.isWhole else { return }
        guard formatVersion >= 7 else {
            throw refusal(
                "puts chunks of \(file.path) in other objects under format version \(formatVersion), which has none "
                    + "(that came with 7)")
        }
        guard !sealedPlain.contains(file.object), !file.objects.contains(where: sealedPlain.contains) else {
            throw refusal("puts chunks of \(file.path) in a sealed object and another")
        }
    }

    /// A link's or a folder's path: safe, listed once, in a known bundle.
    private func checkEntry(_ path: String, bundle: String, leaf: Bool, _ paths: inout PathIndex)
        throws(PatchSyncError)
    {
        try Manifest.checkPath(path)
        guard paths.add(path, leaf: leaf) else {
            throw refusal("lists \(path) twice, or with another path that differs only in case")
        }
        guard bundles.contains(where: { $0.name == bundle }) else {
            throw refusal("puts \(path) in unknown bundle \(bundle)")
        }
    }

    /// A path that keeps ``PathRule``: relative, plain components, NFC, no leading combining mark.
    static func checkPath(_ path: String) throws(PatchSyncError) {
        if let problem = PathRule.problem(path) {
            throw PatchSyncError(
                .refusedData, "manifest path '\(path)' would escape or break the install: it \(problem)",
                remedy: "the build is malformed or tampered with; report it to the publisher")
        }
    }

    private func refusal(_ what: String, remedy: String? = nil) -> PatchSyncError {
        PatchSyncError(
            .refusedData, "manifest of build \(buildId) \(what)",
            remedy: remedy ?? "the build is malformed or tampered with; report it to the publisher")
    }
}

extension Manifest {
    /// The manifest's encoded bytes, the same for the same build: the binary manifest (``ManifestBinary``)
    /// from format 8, JSON with sorted keys before it.
    public func encoded() throws(PatchSyncError) -> Data {
        formatVersion >= 8 ? try ManifestBinary.encode(self) : try json()
    }

    /// The manifest's JSON view, keys sorted: what `manifests/manifest.schema.json` documents, what
    /// `manifest show --decoded` prints, and up to format 7 what a build's target held.
    public func json() throws(PatchSyncError) -> Data {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        do { return try encoder.encode(self) } catch {
            throw PatchSyncError(.internal, "encoding the manifest of \(buildId)", cause: error)
        }
    }

    /// The manifest as a build's target holds it: ``encoded()`` compressed, with zstd from format 8
    /// (gzip before it).
    public func packed() throws(PatchSyncError) -> Data { Manifest.pack(try encoded()) }

    /// `encoded` bytes of a manifest compressed as its target holds them: a binary manifest with zstd
    /// (level 9 with long-distance matching: 200,000 files' 36 MB to 8.68 MB in 0.37 s, where 12 gives
    /// 8.67 MB in 0.96 s), JSON with gzip.
    static func pack(_ encoded: Data, level: Int32 = 9) -> Data {
        encoded.withUnsafeBytes { raw in
            ManifestBinary.isBinary(raw)
                ? Data(Zstd.compress(raw, prefix: nil, level: level)) : Zlib.gzip(encoded, level: min(level, 9))
        }
    }

    /// The encoded bytes of a manifest as a target or an install keeps it (zstd, gzip or none), inflated to at
    /// most ``maximumInflatedSize``.
    public static func unpack(_ data: Data, what: String) throws(PatchSyncError) -> Data {
        if data.starts(with: [0x1f, 0x8b]) { return try Zlib.gunzip(data, limit: maximumInflatedSize, what: what) }
        guard data.starts(with: Zstd.magic) else { return data }
        guard let inflated = data.withUnsafeBytes({ Zstd.decompressFrame($0, prefix: nil, limit: maximumInflatedSize) })
        else {
            throw PatchSyncError(
                .refusedData, "\(what) is not one whole zstd frame of at most \(maximumInflatedSize >> 20) MiB",
                remedy: "the build is malformed or tampered with; report it to the publisher")
        }
        return Data(inflated)
    }

    /// Decodes and validates a manifest from its bytes: a binary manifest (format 8) or JSON, compressed
    /// with zstd or gzip or not at all. Without `validating`, only the layout is checked: for the
    /// publisher's tools that must see what a published manifest names (prune keeps its objects) even
    /// when clients would refuse it. `jsonView`: a file a person gave, which may be the JSON view of a
    /// binary manifest (`manifest show --decoded`).
    public static func decode(
        _ data: Data, what: String, validating: Bool = true, jsonView: Bool = false
    ) throws(PatchSyncError) -> Manifest {
        let bytes = try unpack(data, what: what)
        let manifest: Manifest
        if bytes.withUnsafeBytes(ManifestBinary.isBinary) {
            guard !data.starts(with: [0x1f, 0x8b]) else {
                throw ManifestBinary.refusal(what, "is wrapped in gzip; a binary manifest is zstd-compressed or bare")
            }
            let decoded = bytes.withUnsafeBytes { raw in
                Result { () throws(PatchSyncError) in try ManifestBinary.decode(raw, what: what) }
            }
            manifest = try decoded.get()
        } else {
            do { manifest = try JSONDecoder().decode(Manifest.self, from: bytes) } catch {
                throw PatchSyncError(.refusedData, "\(what) is not a PatchSync manifest", cause: error)
            }
            // From format 8 a build's manifest is binary: JSON naming 8 is only the view a person saved.
            guard manifest.formatVersion < 8 || jsonView else {
                throw PatchSyncError(
                    .refusedData, "\(what) is JSON naming manifest format \(manifest.formatVersion), which is binary",
                    remedy: "the build is malformed or tampered with; report it to the publisher")
            }
        }
        if validating { try manifest.validate() }
        return manifest
    }

    /// The target path of this build's manifest in TUF targets metadata.
    var targetPath: String { Manifest.targetPath(channel: channel, buildId: buildId) }

    static func targetPath(channel: Channel, buildId: BuildID) -> String {
        OriginLayout.manifestTarget(channel: channel, buildId: buildId)
    }
}
