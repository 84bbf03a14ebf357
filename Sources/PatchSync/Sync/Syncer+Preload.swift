import Foundation
import Logging
import Synchronization

/// Human-readable byte counts (binary multiples), for messages of the library and the command line.
public enum ByteCount {
    public static func format(_ bytes: Int64) -> String {
        let units = ["B", "KiB", "MiB", "GiB", "TiB"]
        var value = Double(bytes), unit = 0
        while value >= 1024 && unit < units.count - 1 {
            value /= 1024
            unit += 1
        }
        return unit == 0 ? "\(bytes) B" : String(format: "%.1f %@", value, units[unit])
    }
}

/// The ranges a preload fetched, one file each in `.patchsync/preload/`: `<object>.<offset>.<length>`,
/// present only once its SHA-256 (signed in the plan) was checked; `*.part` while it downloads.
///
/// Thread-safety: the index of present ranges is in a `Mutex`; the requests of one sync add to it.
final class PreloadStore: Sendable {
    let directory: String
    private let index: Mutex<[SHA256Digest: [(offset: Int64, length: Int64)]]>
    /// Fetches under way, by file name: concurrent requests for one object share one download.
    private let inFlight = Mutex<[String: Task<Int64, any Error>]>([:])

    init(directory: String) {
        self.directory = directory
        var index: [SHA256Digest: [(offset: Int64, length: Int64)]] = [:]
        for name in (try? FileSystem.list(directory)) ?? [] {
            guard let range = InstallLayout.preloadRange(named: name) else { continue }
            index[range.object, default: []].append((range.offset, range.length))
        }
        self.index = Mutex(index)
    }

    func path(_ range: PreloadPlan.SealedRange) -> String {
        directory + "/" + Self.name(range)
    }

    /// The name of the file that holds `range` here.
    static func name(_ range: PreloadPlan.SealedRange) -> String {
        InstallLayout.preloadRangeName(object: range.object, offset: range.offset, length: range.length)
    }

    /// The name of the file that keeps the plan whose gzip'd JSON has the SHA-256 `sha`.
    static func planName(_ sha: String) -> String { InstallLayout.preloadPlanName(sha) }

    func has(_ range: PreloadPlan.SealedRange) -> Bool {
        index.withLock { $0[range.object]?.contains { $0.offset == range.offset && $0.length == range.length } ?? false }
    }

    /// Fetches `range` (resuming a part left by an earlier run) and checks it; returns the bytes fetched.
    @discardableResult
    func fetch(
        _ range: PreloadPlan.SealedRange, origin: Origin,
        progress: @escaping @Sendable (Int64) -> Void = { _ in }
    ) async throws(PatchSyncError) -> Int64 {
        if has(range) { return 0 }
        let final = path(range)
        let fetched = try await origin.download(
            ObjectID.path(range.object), to: InstallLayout.partial(final), length: range.length,
            sha256: range.sha256, offset: range.offset, progress: progress)
        do {
            try FileSystem.rename(InstallLayout.partial(final), final)
            try FileSystem.syncDirectory(directory)
        } catch { throw PatchSyncError.wrap(error).during("keeping a preloaded range") }
        index.withLock { $0[range.object, default: []].append((range.offset, range.length)) }
        return fetched
    }

    /// ``fetch(_:origin:progress:)`` shared by concurrent callers: one download per range at a time.
    func fetchShared(_ range: PreloadPlan.SealedRange, origin: Origin) async throws(PatchSyncError) {
        let name = path(range)
        let task = inFlight.withLock { tasks in
            if let running = tasks[name] { return running }
            let task = Task<Int64, any Error> { try await self.fetch(range, origin: origin) }
            tasks[name] = task
            return task
        }
        defer { _ = inFlight.withLock { $0.removeValue(forKey: name) } }
        do { _ = try await task.value } catch { throw PatchSyncError.wrap(error) }
    }

    /// The bytes `offset..<offset+length` of `object` as stored, from a range here that holds them; nil
    /// when none does.
    func read(object: SHA256Digest, offset: Int64, length: Int64) throws(PatchSyncError) -> [UInt8]? {
        guard let held = index.withLock({ $0[object]?.first { $0.offset <= offset && offset + length <= $0.offset + $0.length } })
        else { return nil }
        var bytes = [UInt8](repeating: 0, count: Int(length))
        let file = directory + "/" + InstallLayout.preloadRangeName(object: object, offset: held.offset, length: held.length)
        let failure: Errno? = bytes.withUnsafeMutableBytes { raw in
            do throws(Errno) { try FileDescriptor(path: file, flags: O_RDONLY).read(into: raw, at: offset - held.offset) } catch { return error }
            return nil
        }
        if let failure { throw PatchSyncError.wrap(failure).during("reading preloaded data") }
        return bytes
    }

    /// Forgets (and deletes) the ranges of `object` that hold `offset`: they failed authentication.
    func drop(object: SHA256Digest, offset: Int64) {
        index.withLock { index in
            let damaged = (index[object] ?? []).filter { $0.offset <= offset && offset < $0.offset + $0.length }
            Housekeeping.removePreloadFiles(
                damaged.map {
                    InstallLayout.preloadRangeName(object: object, offset: $0.offset, length: $0.length)
                }, in: directory)
            index[object]?.removeAll { $0.offset <= offset && offset < $0.offset + $0.length }
        }
    }

    /// Deletes every file here but the ranges in `keep` and their parts (an older preload's, or a
    /// build's once staged).
    func prune(keeping keep: Set<String>) {
        let unneeded = ((try? FileSystem.list(directory)) ?? []).filter { name in
            !keep.contains(name) && !(InstallLayout.completed(ofPartial: name).map { keep.contains($0) } ?? false)
        }
        Housekeeping.removePreloadFiles(unneeded, in: directory)
        index.withLock { index in
            for (object, ranges) in index {
                index[object] = ranges.filter { keep.contains(InstallLayout.preloadRangeName(object: object, offset: $0.offset, length: $0.length)) }
            }
        }
    }
}

/// Where an unlocked preload build's objects come from: its sealed objects opened with the released
/// keys, from the preload store (or fetched into it whole when a range is missing), and the plain
/// ranges the preload fetched. Every chunk still goes through the pipeline's plaintext hash check.
struct SealedSource: Sendable {
    let store: PreloadStore
    let keys: [String: ContentKey]
    /// The build's sealed objects, by plain object.
    let sealed: [SHA256Digest: SealedObject]
    /// The store's files kept once the build is staged: the plan and the sealed manifest, which later
    /// syncs open again.
    let keep: Set<String>

    func isSealed(_ object: SHA256Digest) -> Bool { sealed[object] != nil }

    /// The stored bytes of each need (chunks of one object), as the plain object holds them: opened
    /// from sealed units, or read from preloaded plain ranges; nil when they are plain and not all here
    /// (fetched from the origin as usual).
    func stored(_ needs: [Plan.Need], origin: Origin) async throws(PatchSyncError) -> [[UInt8]]? {
        let object = needs[0].object
        guard let sealedObject = sealed[object] else {
            var out: [[UInt8]] = []
            for need in needs {
                guard
                    let bytes = try store.read(
                        object: object, offset: need.chunk.objectOffset,
                        length: Int64(need.chunk.objectLength))
                else { return nil }
                out.append(bytes)
            }
            return out
        }
        let layout = SealedLayout(units: sealedObject.units)
        var out: [[UInt8]] = []
        for need in needs {
            guard let unit = layout.unit(startingAt: need.chunk.objectOffset), sealedObject.units[unit] == need.chunk.objectLength else {
                throw PatchSyncError(.refusedData, "a chunk of sealed object \(sealedObject.sealed) does not start one of its units")
            }
            out.append(try await open(sealedObject, unit: unit, layout: layout, origin: origin))
        }
        return out
    }

    /// Unit `unit` of a sealed object, opened: from a preloaded range that holds it, else from the whole
    /// sealed object, fetched into the store first.
    private func open(
        _ object: SealedObject, unit: Int, layout: SealedLayout,
        origin: Origin
    ) async throws(PatchSyncError) -> [UInt8] {
        let span = layout.sealedRange(unit, unit)
        var sealedBytes = try store.read(object: object.sealed, offset: span.offset, length: span.length)
        if sealedBytes == nil {
            try await store.fetchShared(
                PreloadPlan.SealedRange(
                    object: object.sealed, offset: 0, length: object.length,
                    sha256: object.sealed), origin: origin)
            sealedBytes = try store.read(object: object.sealed, offset: span.offset, length: span.length)
        }
        guard let sealedBytes, let key = keys[object.keyBuild] else {
            throw PatchSyncError(.internal, "sealed object \(object.sealed) is neither preloaded nor fetched, or has no key")
        }
        var plain = [UInt8](repeating: 0, count: object.units[unit])
        let ok = sealedBytes.withUnsafeBytes { sealedRaw in
            plain.withUnsafeMutableBytes { Sealer(key: key, build: object.keyBuild).open(sealedRaw, object: object, index: unit, into: $0) }
        }
        guard ok else {
            store.drop(object: object.sealed, offset: span.offset)
            throw PatchSyncError(
                .refusedData,
                "preloaded data of build \(object.keyBuild) (object \(object.sealed), unit \(unit)) "
                    + "fails authentication: it was tampered with or damaged",
                remedy: "nothing was installed and the live build is untouched; the damaged part was "
                    + "deleted and is fetched again at the next sync")
        }
        return plain
    }

    /// Opens a whole sealed object (a delta pack) into the plain file `local`, checked against its plain SHA-256.
    func openWhole(_ object: SealedObject, to local: String, origin: Origin) async throws(PatchSyncError) {
        let layout = SealedLayout(units: object.units)
        do {
            try FileSystem.makeDirectory(FileSystem.parent(of: local))
            let output = try FileDescriptor.ownFile(InstallLayout.opening(local), flags: O_WRONLY | O_CREAT | O_TRUNC)
            let hasher = SHA256Hasher()
            for unit in object.units.indices {
                let plain = try await open(object, unit: unit, layout: layout, origin: origin)
                let failure: Errno? = plain.withUnsafeBytes { raw in
                    hasher.update(raw)
                    do throws(Errno) { try output.write(raw, at: layout.starts[unit]) } catch { return error }
                    return nil
                }
                if let failure { throw failure }
            }
            guard hasher.finish() == object.object else {
                throw PatchSyncError(.refusedData, "sealed object \(object.sealed) opens to other bytes than its plain SHA-256")
            }
            try output.sync()
            try FileSystem.rename(InstallLayout.opening(local), local)
        } catch { throw PatchSyncError.wrap(error) }
    }
}

extension Syncer {
    private static let preloadLogger = Logger(label: "patchsync.preload")

    /// A preload build's manifest once unlocked, its bytes, and where its sealed objects come from.
    struct Unlocked {
        var manifest: Manifest
        var data: Data
        var source: SealedSource
    }

    /// What a preload build needs in the store: its plan, its sealed manifest and, until the build is
    /// staged or live with this install's bundles, the ranges of those bundles from the current build.
    struct PreloadNeeds {
        var plan: PreloadPlan
        /// The SHA-256 of the plan's gzip'd JSON (its signed target).
        var sha: String
        /// The sealed manifest: the first of ``ranges``.
        var manifest: PreloadPlan.SealedRange
        var ranges: [PreloadPlan.SealedRange]
        /// Whether the build is staged or live: only its manifest is needed then (a bundle added later
        /// is fetched whole).
        var staged: Bool

        /// The names of the store's files they are, the plan's included.
        var files: Set<String> { Set(ranges.map(PreloadStore.name)).union([PreloadStore.planName(sha)]) }
    }

    /// What preload `target` needs in the store, from its plan (kept in the store, else fetched) and the
    /// install's state.
    private func needs(_ target: ManifestTarget, context: SyncContext) async throws(PatchSyncError) -> PreloadNeeds {
        guard let sha = target.file.hashes["sha256"] else {
            throw PatchSyncError(.refusedData, "target \(target.path) has no sha256")
        }
        let plan = try await loadPlan(target, sha: sha, origin: context.origin)
        let outline = Manifest(
            formatVersion: Manifest.formatVersion, buildId: try BuildID(plan.buildId),
            channel: try Channel(plan.channel), sequence: target.info.sequence, chunking: .standard,
            bundles: plan.bundles, files: [])
        let selection = context.config.selection(of: outline)
        let all = BundleSelection(outline, chosen: nil).wanted
        let recorded = try context.state.read()
        let manifest = PreloadPlan.SealedRange(
            object: plan.manifest.sealed, offset: 0, length: plan.manifest.length,
            sha256: plan.manifest.sealed)
        let staged = [recorded.currentIdentity, recorded.ready].contains { $0?.holds(sha, selection.wanted, all: all) == true }
        let held = [recorded.currentIdentity?.buildId].compactMap { $0 } + recorded.history.suffix(context.config.buildsKept).reversed().compactMap { recorded.deployed[$0]?.buildId }
        let ranges = [manifest] + (staged ? [] : plan.ranges(for: Set(selection.wanted), from: held))
        return PreloadNeeds(plan: plan, sha: sha, manifest: manifest, ranges: ranges, staged: staged)
    }

    /// The store's files that preload `target` needs, for the prunes of another build's steps to keep
    /// (``SyncContext/preloadKeep``). When its plan cannot be read now, every file the store holds:
    /// nothing is deleted, and the preload's own step reports why.
    func preloadFiles(of target: ManifestTarget, context: SyncContext) async -> Set<String> {
        do { return try await needs(target, context: context).files } catch {
            Self.preloadLogger.notice("keeping every preloaded file: the plan of \(target.info.buildId) cannot be read: \(error)")
            return Set((try? FileSystem.list(install.preloadDirectory)) ?? [])
        }
    }

    /// Preloads `target` (a preload build): fetches its plan, then the ranges this install needs (its
    /// bundles, from its current build) into `.patchsync/preload/`, each checked against the signed
    /// hash of its stored bytes. When signed metadata has released the build's key(s), opens the
    /// manifest and returns it to stage; nil while it is locked (``PreloadStatus`` in the state).
    /// The store keeps what this preload needs and ``SyncContext/preloadKeep``; the rest goes (an older
    /// preload's ranges, a staged build's).
    func preload(
        _ target: ManifestTarget, trusted: TrustedMetadata, context: SyncContext,
        report: inout SyncReport
    ) async throws(PatchSyncError) -> Unlocked? {
        guard let info = target.info.preload else {
            throw PatchSyncError(.refusedData, "target \(target.path) is no preload plan")
        }
        let origin = context.origin
        let needs = try await self.needs(target, context: context)
        let (plan, sha, manifestRange, ranges, staged) = (needs.plan, needs.sha, needs.manifest, needs.ranges, needs.staged)
        let store = PreloadStore(directory: install.preloadDirectory)
        do { try FileSystem.makeDirectory(store.directory, mode: 0o700) } catch { throw PatchSyncError.wrap(error) }
        store.prune(keeping: needs.files.union(context.preloadKeep))
        // Released when signed metadata lists every key the build needs (the releases role, online key).
        let keyTargets = try await self.keyTargets(plan, trusted: trusted, origin: origin)
        let released = keyTargets.count == plan.keys.count
        var status = PreloadStatus(
            buildId: plan.buildId, channel: plan.channel, releaseAt: info.releaseAt,
            bytes: ranges.reduce(0) { $0 + $1.length },
            bytesDone: ranges.filter(store.has).reduce(0) { $0 + $1.length }, released: released)
        try context.state.update { $0.recordPreload(staged ? nil : status) }
        let missing = ranges.filter { !store.has($0) }
        if !missing.isEmpty {
            context.onEvent(
                .phase(
                    .preloading,
                    "preloading build \(plan.buildId): \(missing.count) ranges, "
                        + "\(ByteCount.format(missing.reduce(0) { $0 + $1.length })) (sealed until its release)"))
            try await fetch(missing, store: store, status: status, context: context)
            status.bytesDone = status.bytes
            try context.state.update { $0.recordPreload(staged ? nil : status) }
        }
        if !staged {
            report.preload = status
            context.onEvent(.preload(status))
        }
        guard released else {
            report.outcome = .preloaded
            return nil
        }
        context.onEvent(.phase(.unlocking, "build \(plan.buildId) is released: unlocking it"))
        var keys: [String: ContentKey] = [:]
        for (build, file) in keyTargets {
            keys[build] = try await releasedKey(build, file, plan: plan, origin: origin)
        }
        guard let key = keys[plan.buildId],
            let sealedManifest = try store.read(
                object: manifestRange.object, offset: 0,
                length: manifestRange.length)
        else {
            throw PatchSyncError(.internal, "the preloaded manifest of \(plan.buildId) is missing")
        }
        let manifest: Manifest
        do { manifest = try plan.openManifest(Data(sealedManifest), key: key) } catch {
            store.drop(object: manifestRange.object, offset: 0)
            throw error
        }
        guard manifest.sequence == target.info.sequence else {
            throw PatchSyncError(.refusedData, "the sealed manifest of \(plan.buildId) has another sequence than its signed target")
        }
        let sealed = Dictionary((manifest.sealed ?? []).map { ($0.object, $0) }, uniquingKeysWith: { a, _ in a })
        let listed = Set(plan.objects.map(\.sealed))
        for object in sealed.values where !listed.contains(object.sealed) || keys[object.keyBuild] == nil {
            throw PatchSyncError(
                .refusedData,
                "the manifest of \(plan.buildId) names sealed object \(object.sealed), which its "
                    + "signed plan does not list or no released key opens")
        }
        let keep = Set([PreloadStore.name(manifestRange), PreloadStore.planName(sha)]).union(context.preloadKeep)
        return Unlocked(
            manifest: manifest, data: Zlib.gzip(try manifest.encoded()),
            source: SealedSource(store: store, keys: keys, sealed: sealed, keep: keep))
    }

    /// The plan of preload target `target`, kept beside the ranges (a sync after the release then fetches
    /// only metadata and the key), checked against its signed hash and entry.
    private func loadPlan(_ target: ManifestTarget, sha: String, origin: Origin) async throws(PatchSyncError) -> PreloadPlan {
        let consistent = OriginLayout.targetFile(target.path, sha256: sha)
        let planFile = install.layout.preloadPlanFile(sha)
        let planData: Data
        if let kept = try? FileSystem.read(planFile, limit: Int(target.file.length)), SHA256Hasher.hash(kept).hex == sha {
            planData = kept
        } else {
            planData = try await origin.signed(consistent, length: target.file.length, sha256: sha)
            do {
                try FileSystem.makeDirectory(install.preloadDirectory, mode: 0o700)
                try FileSystem.writeAtomically(planData, to: planFile)
            } catch { throw PatchSyncError.wrap(error) }
        }
        let plan = try PreloadPlan.decode(planData, what: consistent)
        guard plan.buildId == target.info.buildId, plan.channel == target.info.channel, plan.keys[plan.buildId] != nil else {
            throw PatchSyncError(.refusedData, "\(consistent) describes another build than its signed target entry")
        }
        return plan
    }

    /// Where the sealed objects of an installed build that was a preload come from (a repair fetches
    /// some of them again): its released keys, through signed metadata; nil for a build with none. What
    /// the preload the install records as pending needs is kept when the repair prunes the store.
    func sealedSource(for manifest: Manifest, context: SyncContext) async throws(PatchSyncError) -> SealedSource? {
        guard let objects = manifest.sealed, !objects.isEmpty else { return nil }
        let origin = context.origin
        let trusted = try await origin.refreshTrust(
            directory: install.metadataDirectory, now: now,
            deadline: origin.refreshDeadline(seconds: context.config.refreshDeadline, giveUp: giveUpAfter))
        let target = try ManifestTarget(in: trusted.targets.signed, channel: manifest.channel, build: manifest.buildId.value)
        guard let sha = target.file.hashes["sha256"], target.info.preload != nil else {
            throw PatchSyncError(.refusedData, "build \(manifest.buildId) has sealed objects, and its target is no preload plan")
        }
        let plan = try await loadPlan(target, sha: sha, origin: origin)
        let keyTargets = try await self.keyTargets(plan, trusted: trusted, origin: origin)
        var keys: [String: ContentKey] = [:]
        for build in plan.keys.keys.sorted() {
            guard let file = keyTargets[build] else {
                throw PatchSyncError(.refusedData, "signed metadata no longer lists the released key of \(build)")
            }
            keys[build] = try await releasedKey(build, file, plan: plan, origin: origin)
        }
        var keep: Set<String> = [PreloadStore.planName(sha)]
        if let pending = try pendingPreload(trusted: trusted, state: context.state, besides: manifest.buildId.value) {
            keep.formUnion(await preloadFiles(of: pending, context: context))
        }
        let store = PreloadStore(directory: install.preloadDirectory)
        do { try FileSystem.makeDirectory(store.directory, mode: 0o700) } catch { throw PatchSyncError.wrap(error) }
        return SealedSource(
            store: store, keys: keys, sealed: Dictionary(objects.map { ($0.object, $0) }, uniquingKeysWith: { a, _ in a }),
            keep: keep)
    }

    /// The target of the preload that `state` records (fetched ahead of its release, not staged), when it
    /// is not `build` and signed metadata still lists it.
    private func pendingPreload(
        trusted: TrustedMetadata, state: StateStore,
        besides build: String
    ) throws(PatchSyncError) -> ManifestTarget? {
        guard let status = try state.read().preload, status.buildId != build else { return nil }
        return ManifestTarget.all(in: trusted.targets.signed, channel: try Channel(status.channel))
            .first { $0.info.buildId == status.buildId && $0.info.preload != nil }
    }

    /// The signed targets of the released keys of `plan`'s builds that the releases role lists (those
    /// not released yet are absent).
    private func keyTargets(
        _ plan: PreloadPlan, trusted: TrustedMetadata,
        origin: Origin
    ) async throws(PatchSyncError) -> [String: TargetFile] {
        let client = TrustClient(directory: install.metadataDirectory, source: origin.preferring(0), now: now)
        var found: [String: TargetFile] = [:]
        for build in plan.keys.keys.sorted() {
            found[build] = try await client.findTarget(Releases.keyTarget(channel: plan.channel, build: build), in: trusted)
        }
        return found
    }

    /// A released content key: fetched within ``Releases/maxKeyBytes`` and checked against its signed
    /// hash, then against the commitment the targets key signed for `build`.
    private func releasedKey(
        _ build: String, _ file: TargetFile, plan: PreloadPlan,
        origin: Origin
    ) async throws(PatchSyncError) -> ContentKey {
        guard let hash = file.hashes["sha256"], file.length <= Releases.maxKeyBytes else {
            throw PatchSyncError(.refusedData, "the released key of \(build) is over \(Releases.maxKeyBytes) bytes or has no sha256")
        }
        let path = OriginLayout.targetFile(Releases.keyTarget(channel: plan.channel, build: build), sha256: hash)
        let key = try ContentKey.read(
            try await origin.signed(path, length: file.length, sha256: hash),
            what: "the released key of \(build)", build: build)
        guard plan.keys[build] == key.commitment(build: build) else {
            throw PatchSyncError(
                .refusedData, "the key released for build \(build) is not the key its content was sealed with",
                remedy: "nothing was decrypted and the live build is untouched; the publisher must release "
                    + "the build's own key (`patchsync repo release \(build)`)")
        }
        return key
    }

    /// Fetches `ranges` into the store, ``InstallConfig/connections`` at once, with progress events and
    /// the state's preload status kept current (a preload stopped part way resumes where it was).
    private func fetch(
        _ ranges: [PreloadPlan.SealedRange], store: PreloadStore, status: PreloadStatus,
        context: SyncContext
    ) async throws(PatchSyncError) {
        let total = ranges.reduce(0) { $0 + $1.length }
        let progress = TransferProgress(done: status.bytesDone, total: status.bytesDone + total, filesTotal: 0)
        let done = Tally(status.bytesDone)
        try await ChunkFetcher.each(ranges, atOnce: context.config.connections) { range in
            let counted = Tally(0)  // of this range, so far
            try await store.fetch(range, origin: context.origin) { have in
                guard let event = progress.add(counted.raise(to: have)) else { return }
                if let meter = context.meter { meter.post(event) } else { context.onEvent(event) }  // not from the transfer thread
            }
            var updated = status
            updated.bytesDone = done.add(range.length)
            try context.state.update { $0.recordPreload(updated) }
        }
    }
}

/// A byte count that concurrent requests add to. Thread-safety: a `Mutex`.
final class Tally: Sendable {
    private let value: Mutex<Int64>
    init(_ start: Int64) { value = Mutex(start) }
    /// The count now.
    var total: Int64 { value.withLock { $0 } }
    /// Adds `bytes`; returns the new total.
    @discardableResult
    func add(_ bytes: Int64) -> Int64 {
        value.withLock {
            $0 += bytes
            return $0
        }
    }
    /// Raises the count to `total` when higher; returns by how much.
    func raise(to total: Int64) -> Int64 {
        value.withLock { current in
            defer { current = max(current, total) }
            return max(0, total - current)
        }
    }
}
