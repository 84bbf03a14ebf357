import Foundation

extension [any ChunkSource] {
    /// The first source's copy of a whole object (see ``ChunkSource/whole(_:length:to:progress:)``).
    func whole(
        _ object: SHA256Digest, length: Int64, to local: String,
        progress: @escaping @Sendable (Int64) -> Void
    ) async throws(PatchSyncError) -> Int64 {
        for source in self {
            if let fetched = try await source.whole(object, length: length, to: local, progress: progress) {
                return fetched
            }
        }
        throw PatchSyncError(.internal, "no source holds object \(object)")
    }
}

/// The origin's objects, by range requests on its mirrors under the retry policy: it holds every chunk,
/// so it is asked last.
struct OriginChunks: ChunkSource {
    let origin: Origin
    /// How the manifest being staged names its objects.
    var naming: ObjectNaming = .current

    /// Fetches one coalesced range; returns once all its needs are written. While the client yields to
    /// other traffic, the range goes in parts of its ``HTTPClient/requestBudget``. Each attempt asks for
    /// what is still missing: a response cut short keeps the chunks it delivered, and counts as progress
    /// for the origin's retry policy (``Origin/withRetries(_:absence:deadline:preferring:onGiveUp:_:)``).
    func deliver(
        _ needs: [Plan.Need], to pipeline: ChunkPipeline, files: StagedFiles,
        delivered: @escaping @Sendable ([Plan.Need]) -> Void
    ) async throws(PatchSyncError) -> [Plan.Need] {
        var remaining = needs
        let segment = naming.segment(of: needs[0].chunk.objectOffset)  // one request stays in one segment
        let path = naming.path(needs[0].object, segment: segment)
        try await origin.withRetries("object \(needs[0].object)") {
            (mirror: Int) async throws(PatchSyncError) -> Origin.Attempt<Void> in
            let url = origin.url(path, mirror: mirror)
            let part = ChunkFetcher.prefix(of: remaining, budget: origin.client.requestBudget)
            let sink = ChunkSink(needs: part, pipeline: pipeline, url: url, base: naming.base(of: segment))
            var result = await origin.client.fetch(
                TransferRequest(url: url, range: sink.range, maxBytes: Int64.max),
                into: sink)
            await sink.drained()
            let (left, refused) = sink.outcome
            remaining = left + remaining.dropFirst(part.count)
            if let refused { result = .failure(.refused(refused)) }
            try await files.durable()
            let missing = Set(left.map(\.chunk.sha256))
            delivered(part.filter { !missing.contains($0.chunk.sha256) })
            if remaining.isEmpty { return .done(()) }
            let progressed = left.count < part.count
            switch result {
            case .failure(let failure): return .failed(failure, progressed: progressed)
            case .success where left.isEmpty: return .more  // the next part of the range
            case .success:
                return .failed(
                    .wrongRange("the response ended before \(left.count) of its \(part.count) chunks"),
                    progressed: progressed)
            }
        }
        return []
    }

    func whole(
        _ object: SHA256Digest, length: Int64, to local: String,
        progress: @escaping @Sendable (Int64) -> Void
    ) async throws(PatchSyncError) -> Int64? {
        try await origin.download(naming.path(object), to: local, length: length, sha256: object, progress: progress)
    }
}

/// An unlocked preload's objects: sealed ones opened with the released keys from what was preloaded
/// (never fetched plain), and the plain ranges the preload fetched. A preloaded chunk that fails its
/// hash is dropped from the store and the sync refused: fetched again at the next sync.
struct PreloadChunks: ChunkSource {
    let source: SealedSource
    let origin: Origin
    /// Content bytes delivered (as installed, once per destination): fetched ahead by earlier syncs, not now from the origin.
    let delivered = Tally(0)

    func deliver(
        _ needs: [Plan.Need], to pipeline: ChunkPipeline, files: StagedFiles,
        delivered: @escaping @Sendable ([Plan.Need]) -> Void
    ) async throws(PatchSyncError) -> [Plan.Need] {
        guard let stored = try await source.stored(needs, origin: origin) else { return needs }
        for (need, bytes) in zip(needs, stored) {
            let sink = ChunkSink(needs: [need], pipeline: pipeline, url: "preloaded object \(need.object)")
            if let failure = bytes.withUnsafeBytes({ sink.receive($0) }) { throw failure }
            await sink.drained()
            if let refused = sink.outcome.failure { throw refused }
            guard sink.outcome.remaining.isEmpty else {
                source.dropDamaged(need)
                throw PatchSyncError(
                    .refusedData, "a preloaded chunk of object \(need.object) does not match its SHA-256",
                    remedy: "nothing was installed and the live build is untouched; a damaged preloaded "
                        + "range is fetched again at the next sync, else report it to the publisher")
            }
        }
        try await files.durable()
        self.delivered.add(needs.reduce(0) { $0 + Int64($1.chunk.length) * Int64($1.destinations.count) })
        delivered(needs)
        return []
    }

    func whole(
        _ object: SHA256Digest, length: Int64, to local: String,
        progress: @escaping @Sendable (Int64) -> Void
    ) async throws(PatchSyncError) -> Int64? {
        guard let sealed = source.sealed[object] else { return nil }
        if !FileSystem.exists(local) { try await source.openWhole(sealed, to: local, origin: origin) }
        progress(length)
        return 0
    }
}

extension SealedSource {
    /// Forgets a preloaded plain range whose chunk failed its hash, so the next sync fetches it from
    /// the origin (a sealed unit that fails authentication is dropped where it is opened).
    func dropDamaged(_ need: Plan.Need) {
        if !isSealed(need.object) { store.drop(object: need.object, offset: need.chunk.objectOffset) }
    }
}

extension SyncContext {
    /// Where the chunks of `manifest` come from, in the order they are asked: the unlocked preload's
    /// store (when staging a build that was preloaded), then LAN peers, then the origin.
    func sources(for manifest: Manifest) -> [any ChunkSource] {
        (sealed.map { [PreloadChunks(source: $0, origin: origin)] } ?? [])
            + (peers.map { [PeerChunks(peers: $0)] } ?? [])
            + [OriginChunks(origin: origin, naming: ObjectNaming(format: manifest.formatVersion))]
    }
}
