import Foundation
import Logging

extension Syncer {
    /// What the delta path did in one sync.
    struct DeltaResult {
        var files = 0
        var chunks = 0
        var packBytes: Int64 = 0
        /// Where the transfer's progress stands after the pack (resumed bytes included), for the chunks
        /// to count on from.
        var progressBytes: Int64 = 0
        /// Files the delta path was planned for but that go by chunks after all.
        var fellBack = 0
    }

    private static let deltaLogger = Logger(label: "patchsync.delta")

    /// Rebuilds the files a delta pack from the live build covers, before any chunk is fetched. The pack
    /// is downloaded (resumably) to `.patchsync/deltas/`, checked against the manifest's length and
    /// SHA-256, and each rebuilt chunk against its own hash. Anything wrong with the pack or a delta
    /// leaves the files to the chunk path; only local failures and cancellation stop the sync.
    func applyDeltas(
        _ manifest: Manifest, plan: Plan, live: LiveTree, files: StagedFiles,
        context: SyncContext
    ) async throws(PatchSyncError) -> DeltaResult {
        var result = DeltaResult()
        let onEvent = context.onEvent
        guard let route = UpdatePlan.deltaRoute(manifest, plan: plan, local: live) else { return result }
        let (pack, candidates) = (route.pack, route.files)
        onEvent(
            .phase(
                .patching, "patching \(candidates.count) files with the deltas from \(pack.from) (\(pack.length) bytes)"
            ))
        let path = install.layout.deltaPack(pack.object)
        // Progress counts the pack, then the chunks (ChunkFetcher goes on from the pack's bytes): until
        // the deltas are applied, the chunks still to come are those of the files no delta covers.
        let chunksAfter = UpdatePlan.chunkBytes(plan, besides: route.paths)
        let progress = TransferProgress(total: pack.length + chunksAfter, filesTotal: candidates.count)
        do {
            let meter = context.meter
            result.packBytes = try await context.sources(for: manifest).whole(
                pack.object, length: pack.length, to: path
            ) { have in
                guard let event = progress.set(have) else { return }
                if let meter { meter.post(event) } else { onEvent(event) }  // not from the transfer thread
            }
            result.progressBytes = progress.bytesDone
        } catch  where error.code == .refusedData || error.code == .originUnavailable {
            result.progressBytes = progress.bytesDone
            Self.deltaLogger.notice("delta pack from \(pack.from) not used: \(error)")
            onEvent(.phase(.fetching, "the delta pack is unusable (\(error.message)); fetching chunks instead"))
            result.fellBack = pack.files
            return result
        }
        let (rebuilt, chunks, skipped) = try rebuild(
            from: path, pack: pack, candidates: candidates, files: files, done: plan.done, onEvent: onEvent)
        (result.files, result.chunks) = (rebuilt, chunks)
        result.fellBack = max(0, pack.files - skipped - result.files)
        return result
    }

    /// Rebuilds each file of `candidates` the pack at `path` has a delta for; a delta refused is left to the
    /// chunks. Returns the files rebuilt, the chunks written, and the deltas skipped (not needed here).
    private func rebuild(
        from path: String, pack: DeltaSource, candidates: [Int: (FileEntry, String)], files: StagedFiles,
        done: Set<StateStore.ChunkRef>, onEvent: @Sendable (SyncEvent) -> Void
    ) throws(PatchSyncError) -> (files: Int, chunks: Int, skipped: Int) {
        var rebuilt = 0, chunks = 0
        let input: FileDescriptor
        do { input = try FileDescriptor(path: path, flags: O_RDONLY) } catch { throw PatchSyncError.wrap(error) }
        var remaining = candidates
        var skipped = 0
        do throws(PatchSyncError) {
            try DeltaPack.read(input) { (index, instructions) throws(PatchSyncError) in
                if Task.isCancelled { throw PatchSyncError.cancelled }
                guard let index = pack.narrowed.map({ $0[index] }) ?? index,
                    let (file, source) = remaining.removeValue(forKey: index)
                else {
                    skipped += 1  // not needed here (done, or the live file differs): not a fallback
                    return
                }
                let chunksDone = Set(file.chunks.indices.filter { done.contains(.init(path: file.path, index: $0)) })
                let outcome = try DeltaApplier(file: file, files: files, done: chunksDone)
                    .rebuild(from: source, instructions: instructions)
                chunks += outcome.written
                if outcome.refused == 0 {
                    rebuilt += 1
                } else {
                    let why = outcome.problem ?? "chunk hashes differ"
                    Self.deltaLogger.notice(
                        "the delta of \(file.path) was refused (\(why)): \(outcome.refused) chunks are fetched instead")
                }
            }
        } catch  where error.code == .refusedData {
            Self.deltaLogger.notice("\(error)")
            onEvent(.phase(.fetching, "the delta pack is malformed (\(error.message)); fetching the rest as chunks"))
        }
        return (rebuilt, chunks, skipped)
    }
}

extension Syncer {
    /// The manifest of `target` rebuilt from the live build's manifest with a manifest delta that signed
    /// targets metadata lists (checked against the SHA-256 and length of the JSON it must build); nil when
    /// there is none or anything about it fails, and the whole manifest is fetched instead.
    func manifestFromDelta(_ target: ManifestTarget, origin: Origin) async -> (Manifest, Data)? {
        guard let current = install.currentDeployment() else { return nil }
        let live = Deployment.buildID(of: current)
        guard let delta = target.info.manifestDeltas?.first(where: { $0.from == live }),
            let object = SHA256Digest(hex: delta.object), (0...Manifest.maximumInflatedSize).contains(delta.size),
            (0...Int64(Manifest.maximumInflatedSize)).contains(delta.jsonLength),
            (1...Int64(Manifest.maximumInflatedSize)).contains(delta.length)
        else { return nil }
        do {
            let path = install.manifestPath(current)
            let old = try Manifest.unpack(try FileSystem.read(path, limit: 256 << 20), what: path)
            let stored = try await origin.signed(OriginLayout.object(object), length: delta.length, sha256: object.hex)
            let json = try delta.apply(stored: stored, to: old)
            guard json.count == delta.jsonLength, SHA256Hasher.hash(json).hex == delta.sha256 else {
                throw PatchSyncError(
                    .refusedData, "the manifest rebuilt by delta \(object) does not match its signed SHA-256")
            }
            let manifest = try Manifest.decode(json, what: "manifest \(target.info.buildId) rebuilt from \(live)'s")
            try manifest.check(matches: target.info, what: "the manifest rebuilt by delta \(object)")
            return (manifest, Manifest.pack(json, level: 3))  // kept locally: speed over size
        } catch {
            Self.deltaLogger.notice("manifest delta from \(live) not used, fetching the whole manifest: \(error)")
            return nil
        }
    }
}
