import Foundation
import Logging
import Synchronization

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

    /// The files of `plan` that the manifest's delta pack from the live build can rebuild: target file
    /// index → (file, a verified live file with the delta's source content).
    func deltaCandidates(_ manifest: Manifest, plan: Plan, live: LiveTree,
                         done: Set<StateStore.ChunkRef>) -> (DeltaSource, [Int: (FileEntry, String)])? {
        guard let source = live.manifest, let pack = manifest.deltas?.first(where: { $0.from == source.buildId }) else {
            return nil
        }
        let before = Dictionary(source.files.map { ($0.path, $0.sha256) }, uniquingKeysWith: { a, _ in a })
        let assembled = Set(plan.assembled.map(\.path))
        var candidates: [Int: (FileEntry, String)] = [:]
        for (index, file) in manifest.files.enumerated() where assembled.contains(file.path) {
            guard let sha = before[file.path], let path = live.files[sha],
                  file.chunks.indices.contains(where: { !done.contains(.init(path: file.path, index: $0)) }) else { continue }
            candidates[index] = (file, path)
        }
        return candidates.isEmpty ? nil : (pack, candidates)
    }

    /// Rebuilds the files a delta pack from the live build covers, before any chunk is fetched. The pack
    /// is downloaded (resumably) to `.patchsync/deltas/`, checked against the manifest's length and
    /// SHA-256, and each rebuilt chunk against its own hash. Anything wrong with the pack or a delta
    /// leaves the files to the chunk path; only local failures and cancellation stop the sync.
    func applyDeltas(_ manifest: Manifest, plan: Plan, live: LiveTree, files: StagedFiles,
                     context: SyncContext) async throws(PatchSyncError) -> DeltaResult {
        var result = DeltaResult()
        let (origin, onEvent) = (context.origin, context.onEvent)
        let done = plan.done
        guard let (pack, candidates) = deltaCandidates(manifest, plan: plan, live: live, done: done) else { return result }
        onEvent(.phase("patching \(candidates.count) files with the deltas from \(pack.from) (\(pack.length) bytes)"))
        let path = install.deltasDirectory + "/" + pack.object.hex
        // Progress counts the pack, then the chunks (ChunkFetcher goes on from the pack's bytes): until
        // the deltas are applied, the chunks still to come are those of the files no delta covers.
        let covered = Set(candidates.values.map(\.0.path))
        let chunksAfter = plan.fetch.filter { !$0.destinations.allSatisfy { covered.contains($0.path) } }
            .reduce(Int64(0)) { $0 + Int64($1.chunk.objectLength) }
        let progress = TransferProgress(total: pack.length + chunksAfter, filesTotal: candidates.count)
        do {
            if let sealed = context.sealed?.sealed[pack.object], let source = context.sealed {
                if !FileSystem.exists(path) { try await source.openWhole(sealed, to: path, origin: origin) }
                _ = progress.set(pack.length)
            } else {
                result.packBytes = try await origin.download(ObjectID.path(pack.object), to: path, length: pack.length,
                                                             sha256: pack.object) { have in
                    if let event = progress.set(have) { onEvent(event) }
                }
            }
            result.progressBytes = progress.bytesDone
        } catch where error.code == .refusedData || error.code == .originUnavailable {
            result.progressBytes = progress.bytesDone
            Self.deltaLogger.notice("delta pack from \(pack.from) not used: \(error)")
            onEvent(.phase("the delta pack is unusable (\(error.message)); fetching chunks instead"))
            result.fellBack = pack.files
            return result
        }
        let input: FileDescriptor
        do { input = try FileDescriptor(path: path, flags: O_RDONLY) } catch { throw PatchSyncError.wrap(error) }
        var remaining = candidates
        var skipped = 0
        do throws(PatchSyncError) {
            try DeltaPack.read(input) { (index, instructions) throws(PatchSyncError) in
                if Task.isCancelled { throw PatchSyncError.cancelled }
                guard let (file, source) = remaining.removeValue(forKey: index) else {
                    skipped += 1  // not needed here (done, or the live file differs): not a fallback
                    return
                }
                let chunksDone = Set(file.chunks.indices.filter { done.contains(.init(path: file.path, index: $0)) })
                let outcome = try DeltaApplier(file: file, files: files, done: chunksDone)
                    .rebuild(from: source, instructions: instructions)
                result.chunks += outcome.written
                if outcome.refused == 0 { result.files += 1 } else {
                    let why = outcome.problem ?? "chunk hashes differ"
                    Self.deltaLogger.notice("the delta of \(file.path) was refused (\(why)): \(outcome.refused) chunks are fetched instead")
                }
            }
        } catch where error.code == .refusedData {
            Self.deltaLogger.notice("\(error)")
            onEvent(.phase("the delta pack is malformed (\(error.message)); fetching the rest as chunks"))
        }
        result.fellBack = max(0, pack.files - skipped - result.files)
        return result
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
              let object = SHA256Digest(hex: delta.object), delta.size <= Manifest.maximumInflatedSize,
              delta.jsonLength <= Int64(Manifest.maximumInflatedSize), delta.length <= Int64(Manifest.maximumInflatedSize)
        else { return nil }
        do {
            let path = install.manifestPath(current)
            let old = try Zlib.gunzip(try FileSystem.read(path, limit: 256 << 20), limit: Manifest.maximumInflatedSize, what: path)
            let stored = try await origin.signed(ObjectID.path(object), length: delta.length, sha256: object.hex)
            var instructions = [UInt8](repeating: 0, count: delta.size)
            let inflated = stored.withUnsafeBytes { s in instructions.withUnsafeMutableBytes { Zlib.inflate(s, into: $0) } }
            guard inflated else { throw PatchSyncError(.refusedData, "the manifest delta \(object) does not inflate") }
            let applied = instructions.withUnsafeBytes { i in
                old.withUnsafeBytes { o in Result { () throws(DeltaError) in try Delta.apply(i, to: o) } }
            }
            let json = Data(try applied.get())
            guard json.count == delta.jsonLength, SHA256Hasher.hash(json).hex == delta.sha256 else {
                throw PatchSyncError(.refusedData, "the manifest rebuilt by delta \(object) does not match its signed SHA-256")
            }
            let manifest = try Manifest.decode(json, what: "manifest \(target.info.buildId) rebuilt from \(live)'s")
            guard manifest.buildId.value == target.info.buildId, manifest.channel.name == target.info.channel,
                  manifest.sequence == target.info.sequence else {
                throw PatchSyncError(.refusedData, "the manifest rebuilt by delta describes another build")
            }
            return (manifest, Zlib.gzip(json, level: 6))  // kept locally: speed over size
        } catch {
            Self.deltaLogger.notice("manifest delta from \(live) not used, fetching the whole manifest: \(error)")
            return nil
        }
    }
}

extension Origin {
    /// Downloads `path` into the file at `local`, resuming from what an earlier run left there, and
    /// checks the whole file against `length` and `sha256`; a file that fails is deleted. Returns the
    /// bytes fetched by this call. With `offset`, the file is the `length` bytes of `path` from there.
    /// `progress` is called with the bytes of the file so far (resumed ones included), on the
    /// transfer thread, as they arrive. Retried as ``withRetries(_:absence:deadline:preferring:onGiveUp:_:)``
    /// decides; the bytes of a response cut short are kept, and the next attempt asks for the rest.
    func download(_ path: String, to local: String, length: Int64, sha256: SHA256Digest, offset: Int64 = 0,
                  progress: @escaping @Sendable (Int64) -> Void = { _ in }) async throws(PatchSyncError) -> Int64 {
        let output = try Self.openForResume(local, length: length)
        let start = (try? output.status().st_size).map(Int64.init) ?? 0
        var have = start
        if have < length {
            try await withRetries(path) { (mirror: Int) async throws(PatchSyncError) -> Attempt<Void> in
                // While yielding to other traffic, in parts of the request budget (as chunk ranges go).
                let end = client.requestBudget.map { min(length, have + Int64($0)) } ?? length
                let sink = FileSink(output) { [have] written in progress(have + written) }
                let request = TransferRequest(url: url(path, mirror: mirror), range: (offset + have)...(offset + end - 1),
                                              maxBytes: length)
                let outcome = await client.fetch(request, into: sink)
                have += sink.written
                if let error = sink.error { throw error }
                if have == length { return .done(()) }
                switch outcome {
                case .failure(let failure): return .failed(failure, progressed: sink.written > 0)
                case .success where have == end: return .more  // the next part
                case .success:
                    return .failed(.wrongRange("asked \(end - have + sink.written) bytes, got \(sink.written)"),
                                   progressed: sink.written > 0)
                }
            }
        }
        try Self.verifyDownload(output, sha256: sha256, what: path)
        return length - start
    }

    /// Opens (creating) a download's file for appending; a file longer than `length` starts again.
    private static func openForResume(_ local: String, length: Int64) throws(PatchSyncError) -> FileDescriptor {
        do {
            try FileSystem.makeDirectory(FileSystem.parent(of: local))
            let output = try FileDescriptor(path: local, flags: O_WRONLY | O_CREAT | O_APPEND, mode: 0o600)
            if Int64(try output.status().st_size) > length { try output.truncate(to: 0) }
            return output
        } catch { throw PatchSyncError.wrap(error).during("downloading to \(local)") }
    }

    /// Syncs a complete download and checks its hash; deletes it when the hash differs.
    private static func verifyDownload(_ output: FileDescriptor, sha256: SHA256Digest,
                                       what: String) throws(PatchSyncError) {
        let matches: Bool
        do {
            try output.sync()
            matches = try SHA256Hasher.hash(file: output.path) == sha256
            if !matches { try FileSystem.remove(output.path) }
        } catch { throw PatchSyncError.wrap(error).during("checking \(output.path)") }
        guard matches else {
            throw PatchSyncError(.refusedData, "\(what) does not match the SHA-256 its manifest signs",
                                 remedy: "a mirror serves a damaged or tampered file; report it to the publisher")
        }
    }
}

/// A sink that appends a body to a file.
///
/// Thread-safety: a `Mutex` holds the count and the error (uncontended: written on the transfer
/// thread, read after the transfer completed); `output` is written on the transfer thread only.
final class FileSink: ResponseSink, Sendable {
    private struct State {
        var written: Int64 = 0
        var error: PatchSyncError?
    }

    private let output: FileDescriptor
    private let onWrite: @Sendable (Int64) -> Void
    private let state = Mutex(State())

    /// The bytes written so far.
    var written: Int64 { state.withLock { $0.written } }
    /// Why writing failed, if it did.
    var error: PatchSyncError? { state.withLock { $0.error } }

    /// `onWrite` is called with the bytes written so far after each write.
    init(_ output: FileDescriptor, onWrite: @escaping @Sendable (Int64) -> Void = { _ in }) {
        self.output = output
        self.onWrite = onWrite
    }

    func receive(_ bytes: UnsafeRawBufferPointer) -> PatchSyncError? {
        do { try output.write(bytes) } catch {
            let failure = PatchSyncError.wrap(error).during("saving a download")
            state.withLock { $0.error = failure }
            return failure
        }
        let count = Int64(bytes.count)
        let written = state.withLock { state in
            state.written += count
            return state.written
        }
        onWrite(written)
        return nil
    }
}
