import Foundation
import Logging
import Synchronization

/// Fetches preload builds ahead of their release and unlocks them once signed metadata releases their
/// keys: the preload store's one keeper. What the store keeps is decided here (``PreloadNeeds/files``,
/// ``keep``) and nowhere else.
struct Preloader: Sendable {
    private static let preloadLogger = Logger(label: "patchsync.preload")

    let install: Install
    let state: StateStore
    let origin: Origin
    let config: InstallConfig
    /// The time signed metadata is checked at.
    let now: Date
    /// Files of the store that another preload of this sync needs: every prune keeps them.
    var keep: Set<String> = []
    /// Where progress goes; `post` for events from a transfer thread.
    let onEvent: @Sendable (SyncEvent) -> Void
    let post: @Sendable (SyncEvent) -> Void

    /// What a preload step did: where the build stands (nil when it is staged or live already, so no
    /// preload waits), and the build unlocked to stage (nil while it is locked).
    struct Outcome {
        var status: PreloadStatus?
        var unlocked: Unlocked?
    }

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
    private func needs(_ target: ManifestTarget) async throws(PatchSyncError) -> PreloadNeeds {
        guard let sha = target.file.hashes["sha256"] else {
            throw PatchSyncError(.refusedData, "target \(target.path) has no sha256")
        }
        let plan = try await loadPlan(target, sha: sha)
        let outline = Manifest(
            formatVersion: Manifest.formatVersion, buildId: try BuildID(plan.buildId),
            channel: try Channel(plan.channel), sequence: target.info.sequence, chunking: .standard,
            bundles: plan.bundles, files: [])
        let selection = config.selection(of: outline)
        let all = BundleSelection(outline, chosen: nil).wanted
        let recorded = try state.read()
        let manifest = PreloadPlan.SealedRange(
            object: plan.manifest.sealed, offset: 0, length: plan.manifest.length,
            sha256: plan.manifest.sealed)
        let staged = [recorded.currentIdentity, recorded.ready].contains {
            $0?.holds(sha, selection.wanted, all: all) == true
        }
        let held =
            [recorded.currentIdentity?.buildId].compactMap { $0 }
            + recorded.history.suffix(config.buildsKept).reversed().compactMap { recorded.deployed[$0]?.buildId }
        let ranges = [manifest] + (staged ? [] : plan.ranges(for: Set(selection.wanted), from: held))
        return PreloadNeeds(plan: plan, sha: sha, manifest: manifest, ranges: ranges, staged: staged)
    }

    /// The store's files that preload `target` needs, for the prunes of another build's steps to keep
    /// (``keep``). When its plan cannot be read now, every file the store holds:
    /// nothing is deleted, and the preload's own step reports why.
    func preloadFiles(of target: ManifestTarget) async -> Set<String> {
        do { return try await needs(target).files } catch {
            Self.preloadLogger.notice(
                "keeping every preloaded file: the plan of \(target.info.buildId) cannot be read: \(error)")
            return Set((try? FileSystem.list(install.preloadDirectory)) ?? [])
        }
    }

    /// Preloads `target` (a preload build): fetches its plan, then the ranges this install needs (its
    /// bundles, from its current build) into `.patchsync/preload/`, each checked against the signed
    /// hash of its stored bytes. When signed metadata has released the build's key(s), opens the
    /// manifest and returns it to stage; nil while it is locked (``PreloadStatus`` in the state).
    /// The store keeps what this preload needs and ``keep``; the rest goes (an older
    /// preload's ranges, a staged build's).
    func preload(_ target: ManifestTarget, trusted: TrustedMetadata) async throws(PatchSyncError) -> Outcome {
        guard let info = target.info.preload else {
            throw PatchSyncError(.refusedData, "target \(target.path) is no preload plan")
        }
        let needs = try await self.needs(target)
        let (plan, sha, manifestRange, ranges, staged) = (
            needs.plan, needs.sha, needs.manifest, needs.ranges, needs.staged
        )
        let store = PreloadStore(directory: install.preloadDirectory)
        do { try FileSystem.makeDirectory(store.directory, mode: 0o700) } catch { throw PatchSyncError.wrap(error) }
        store.prune(keeping: needs.files.union(keep))
        // Released when signed metadata lists every key the build needs (the releases role, online key).
        let keyTargets = try await self.keyTargets(plan, trusted: trusted)
        let released = keyTargets.count == plan.keys.count
        var status = PreloadStatus(
            buildId: plan.buildId, channel: plan.channel, releaseAt: info.releaseAt,
            bytes: ranges.reduce(0) { $0 + $1.length },
            bytesDone: ranges.filter(store.has).reduce(0) { $0 + $1.length }, released: released)
        try state.update { $0.recordPreload(staged ? nil : status) }
        let missing = ranges.filter { !store.has($0) }
        if !missing.isEmpty {
            onEvent(
                .phase(
                    .preloading,
                    "preloading build \(plan.buildId): \(missing.count) ranges, "
                        + "\(ByteCount.format(missing.reduce(0) { $0 + $1.length })) (sealed until its release)"))
            try await fetch(missing, store: store, status: status)
            status.bytesDone = status.bytes
            try state.update { $0.recordPreload(staged ? nil : status) }
        }
        if !staged { onEvent(.preload(status)) }
        let standing = staged ? nil : status
        guard released else { return Outcome(status: standing) }
        let unlocked = try await unlock(
            plan, keyTargets: keyTargets, store: store, manifestRange: manifestRange, sha: sha, target: target)
        return Outcome(status: standing, unlocked: unlocked)
    }

    /// Opens released preload `plan`: its keys fetched and checked, its sealed manifest opened and checked
    /// against the signed target and plan; the store then keeps only what staging it needs.
    private func unlock(
        _ plan: PreloadPlan, keyTargets: [String: TargetFile], store: PreloadStore,
        manifestRange: PreloadPlan.SealedRange, sha: String, target: ManifestTarget
    ) async throws(PatchSyncError) -> Unlocked {
        onEvent(.phase(.unlocking, "build \(plan.buildId) is released: unlocking it"))
        var keys: [String: ContentKey] = [:]
        for (build, file) in keyTargets {
            keys[build] = try await releasedKey(build, file, plan: plan)
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
        try manifest.check(matches: target.info, what: "the sealed manifest of \(plan.buildId)")
        let sealed = Dictionary((manifest.sealed ?? []).map { ($0.object, $0) }, uniquingKeysWith: { a, _ in a })
        let listed = Set(plan.objects.map(\.sealed))
        for object in sealed.values where !listed.contains(object.sealed) || keys[object.keyBuild] == nil {
            throw PatchSyncError(
                .refusedData,
                "the manifest of \(plan.buildId) names sealed object \(object.sealed), which its "
                    + "signed plan does not list or no released key opens")
        }
        let kept = Set([PreloadStore.name(manifestRange), PreloadStore.planName(sha)]).union(keep)
        return Unlocked(
            manifest: manifest, data: try manifest.packed(),
            source: SealedSource(store: store, keys: keys, sealed: sealed, keep: kept))
    }

    /// The plan of preload target `target`, kept beside the ranges (a sync after the release then fetches
    /// only metadata and the key), checked against its signed hash and entry.
    private func loadPlan(_ target: ManifestTarget, sha: String) async throws(PatchSyncError) -> PreloadPlan {
        let consistent = OriginLayout.targetFile(target.path, sha256: sha)
        let planFile = install.layout.preloadPlanFile(sha)
        let planData: Data
        if let kept = try? FileSystem.read(planFile, limit: Int(target.file.length)), SHA256Hasher.hash(kept).hex == sha
        {
            planData = kept
        } else {
            planData = try await origin.signed(consistent, length: target.file.length, sha256: sha)
            do {
                try FileSystem.makeDirectory(install.preloadDirectory, mode: 0o700)
                try FileSystem.writeAtomically(planData, to: planFile)
            } catch { throw PatchSyncError.wrap(error) }
        }
        let plan = try PreloadPlan.decode(planData, what: consistent)
        guard plan.buildId == target.info.buildId, plan.channel == target.info.channel, plan.keys[plan.buildId] != nil
        else {
            throw PatchSyncError(.refusedData, "\(consistent) describes another build than its signed target entry")
        }
        return plan
    }

    /// Where the sealed objects of an installed build that was a preload come from (a repair fetches
    /// some of them again): its released keys, through signed metadata; nil for a build with none. What
    /// the preload the install records as pending needs is kept when the repair prunes the store.
    func sealedSource(for manifest: Manifest, trusted: TrustedMetadata) async throws(PatchSyncError) -> SealedSource? {
        guard let objects = manifest.sealed, !objects.isEmpty else { return nil }
        let target = try ManifestTarget(
            in: trusted.targets.signed, channel: manifest.channel, build: manifest.buildId.value)
        guard let sha = target.file.hashes["sha256"], target.info.preload != nil else {
            throw PatchSyncError(
                .refusedData, "build \(manifest.buildId) has sealed objects, and its target is no preload plan")
        }
        let plan = try await loadPlan(target, sha: sha)
        let keyTargets = try await self.keyTargets(plan, trusted: trusted)
        var keys: [String: ContentKey] = [:]
        for build in plan.keys.keys.sorted() {
            guard let file = keyTargets[build] else {
                throw PatchSyncError(.refusedData, "signed metadata no longer lists the released key of \(build)")
            }
            keys[build] = try await releasedKey(build, file, plan: plan)
        }
        var kept: Set<String> = [PreloadStore.planName(sha)]
        if let pending = try pendingPreload(trusted: trusted, besides: manifest.buildId.value) {
            kept.formUnion(await preloadFiles(of: pending))
        }
        let store = PreloadStore(directory: install.preloadDirectory)
        do { try FileSystem.makeDirectory(store.directory, mode: 0o700) } catch { throw PatchSyncError.wrap(error) }
        return SealedSource(
            store: store, keys: keys,
            sealed: Dictionary(objects.map { ($0.object, $0) }, uniquingKeysWith: { a, _ in a }),
            keep: kept)
    }

    /// The target of the preload that `state` records (fetched ahead of its release, not staged), when it
    /// is not `build` and signed metadata still lists it.
    private func pendingPreload(trusted: TrustedMetadata, besides build: String) throws(PatchSyncError)
        -> ManifestTarget?
    {
        guard let status = try state.read().preload, status.buildId != build else { return nil }
        return ManifestTarget.all(in: trusted.targets.signed, channel: try Channel(status.channel))
            .first { $0.info.buildId == status.buildId && $0.info.preload != nil }
    }

    /// The signed targets of the released keys of `plan`'s builds that the releases role lists (those
    /// not released yet are absent).
    private func keyTargets(_ plan: PreloadPlan, trusted: TrustedMetadata) async throws(PatchSyncError) -> [String:
        TargetFile]
    {
        let client = TrustClient(directory: install.metadataDirectory, source: origin.preferring(0), now: now)
        var found: [String: TargetFile] = [:]
        for build in plan.keys.keys.sorted() {
            found[build] = try await client.findTarget(
                OriginLayout.keyTarget(channel: plan.channel, build: build), in: trusted)
        }
        return found
    }

    /// A released content key: fetched within ``Releases/maxKeyBytes`` and checked against its signed
    /// hash, then against the commitment the targets key signed for `build`.
    private func releasedKey(_ build: String, _ file: TargetFile, plan: PreloadPlan) async throws(PatchSyncError)
        -> ContentKey
    {
        guard let hash = file.hashes["sha256"], file.length <= Releases.maxKeyBytes else {
            throw PatchSyncError(
                .refusedData, "the released key of \(build) is over \(Releases.maxKeyBytes) bytes or has no sha256")
        }
        let path = OriginLayout.targetFile(OriginLayout.keyTarget(channel: plan.channel, build: build), sha256: hash)
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
    private func fetch(_ ranges: [PreloadPlan.SealedRange], store: PreloadStore, status: PreloadStatus)
        async throws(PatchSyncError)
    {
        let total = ranges.reduce(0) { $0 + $1.length }
        let progress = TransferProgress(done: status.bytesDone, total: status.bytesDone + total, filesTotal: 0)
        let done = Tally(status.bytesDone)
        try await Concurrently.each(ranges, atOnce: config.connections) { range in
            let counted = Tally(0)  // of this range, so far
            try await store.fetch(range, origin: origin) { have in
                guard let event = progress.add(counted.raise(to: have)) else { return }
                post(event)  // not from the transfer thread
            }
            var updated = status
            updated.bytesDone = done.add(range.length)
            try state.update { $0.recordPreload(updated) }
        }
    }
}
