import Foundation

/// The one writer of build targets: publish (normal and preload), promote, rollback and withdraw list,
/// mark and unlist builds through it, and it signs new targets with the keep rule applied.
struct TargetWriter: Sendable {
    let origin: String
    let signers: Repository.Signers
    var keepBuilds: Int
    var now: Date
    /// The publisher's content-key folder: a pending preload is listed again above a build listed below
    /// it (``PreloadRelisting``).
    var contentKeys: String? = nil

    /// Writes `manifest` as the target `target`, with manifest deltas from `deltaBases`, and commits new
    /// signed targets. `withdrawing` is marked withdrawn (a later rollback never picks it); `unlisting`
    /// is taken off. The channel's pending preloads that the build would leave behind are listed again
    /// above it (``PreloadRelisting``); their build ids are returned.
    @discardableResult
    func write(
        _ manifest: Manifest, target: String, repo: inout Repository, deltaBases: [Publisher.DeltaBase] = [],
        promotedFrom: String? = nil, rollback: RollbackNote? = nil, withdrawing: String? = nil,
        unlisting: [String] = [],
        published: PublishNote? = nil
    ) throws(PatchSyncError) -> [String] {
        let relisting = PreloadRelisting(origin: origin, contentKeys: contentKeys)
        try relisting.checkKeys(channel: manifest.channel.name, repo: repo)
        let json = try manifest.encoded()
        let manifestDeltas = try self.manifestDeltas(to: json, from: deltaBases)
        var info = ManifestTargetInfo(
            channel: manifest.channel.name, buildId: manifest.buildId.value,
            sequence: manifest.sequence,
            manifestDeltas: manifestDeltas.isEmpty ? nil : manifestDeltas)
        info.files = manifest.files.count
        info.size = manifest.totalSize
        info.promotedFrom = promotedFrom
        info.rollback = rollback
        info.published = published
        var targets = repo.targetFiles
        for path in unlisting { targets[path] = nil }
        targets[target] = try Self.store(Manifest.pack(json), as: target, in: origin, info: info)
        if let withdrawing { targets[withdrawing]?.custom?.withdrawn = true }
        let relisted = try relisting.relist(
            channel: manifest.channel.name, above: manifest.sequence, in: &targets, repo: repo)
        try commit(targets, repo: &repo)
        return relisted
    }

    /// Writes `data` (a manifest's gzip'd JSON, a preload plan) as the file of target `target` in `origin`,
    /// named by its hash: the one place a build's target entry is made.
    static func store(_ data: Data, as target: String, in origin: String, info: ManifestTargetInfo)
        throws(PatchSyncError) -> TargetFile
    {
        let hash = SHA256Hasher.hash(data).hex
        let file = OriginLayout(root: origin).path(OriginLayout.targetFile(target, sha256: hash))
        do { try FileSystem.writeAtomically(data, to: file) } catch {
            throw PatchSyncError.wrap(error).during("writing target \(target)")
        }
        return TargetFile(length: Int64(data.count), hashes: ["sha256": hash], custom: info)
    }

    /// Lists preload `plan` (its encoded JSON) as target `target` of `manifest`'s build, released at
    /// `releaseAt`, and commits new signed targets (with the releases role delegated).
    func writePreload(
        _ plan: Data, target: String, manifest: Manifest, releaseAt: Date, published: PublishNote,
        repo: inout Repository
    ) throws(PatchSyncError) {
        var info = ManifestTargetInfo(
            channel: manifest.channel.name, buildId: manifest.buildId.value, sequence: manifest.sequence)
        info.size = manifest.totalSize  // the bytes players need room for; not the file count
        info.preload = PreloadInfo(releaseAt: releaseAt)
        info.published = published
        var targets = repo.targetFiles
        targets[target] = try Self.store(plan, as: target, in: origin, info: info)
        try commit(targets, repo: &repo, delegatingReleases: true)
    }

    /// Signs `targets` as the new targets metadata, without the builds beyond the newest `keepBuilds` of
    /// each channel (``Publisher/beyondKept(_:keep:released:)``).
    /// `withdrawn`: a withdraw that leaves the channel without an installable build, told to its players
    /// through the channel's record.
    func commit(
        _ targets: [String: TargetFile], repo: inout Repository, delegatingReleases: Bool = false,
        withdrawn: (channel: String, withdrawal: ChannelRecord.Withdrawal)? = nil
    ) throws(PatchSyncError) {
        var targets = targets
        for old in Publisher.beyondKept(targets, keep: keepBuilds, installable: repo.isReleased) { targets[old] = nil }
        try recordChannels(&targets, repo: repo, withdrawn: withdrawn)
        try repo.commit(targets: targets, signers: signers, now: now, delegatingReleases: delegatingReleases)
    }

    /// Gives each channel the record (``ChannelRecord``) its listed builds need: one when its highest
    /// sequence ever is above every build it lists, or a withdraw emptied it; none otherwise. A
    /// withdrawal stays recorded until the channel lists an installable build again.
    private func recordChannels(
        _ targets: inout [String: TargetFile], repo: Repository,
        withdrawn: (channel: String, withdrawal: ChannelRecord.Withdrawal)?
    ) throws(PatchSyncError) {
        let before = ChannelRecord.all(in: repo.targetFiles)
        for (channel, highest) in ChannelListing.highestSequences(origin: origin, repo.targetFiles, targets) {
            let listed = targets.values.compactMap(\.custom).filter { $0.channel == channel }
            let installable = listed.contains { repo.isReleased($0) }
            let withdrawal =
                withdrawn?.channel == channel ? withdrawn?.withdrawal : (installable ? nil : before[channel]?.withdrawn)
            let path = ChannelRecord.targetPath(channel: channel)
            guard (listed.map(\.sequence).max() ?? 0) < highest || withdrawal != nil else {
                targets[path] = nil
                continue
            }
            let record = ChannelRecord(channel: channel, highestSequence: highest, withdrawn: withdrawal)
            guard targets[path]?.channelRecord != record else { continue }
            let data = try record.encoded()
            let hash = SHA256Hasher.hash(data).hex
            do {
                try FileSystem.writeAtomically(
                    data, to: OriginLayout(root: origin).path(OriginLayout.targetFile(path, sha256: hash)))
            } catch {
                throw PatchSyncError.wrap(error).during("recording channel \(channel)")
            }
            targets[path] = TargetFile(length: Int64(data.count), hashes: ["sha256": hash], channelRecord: record)
        }
    }

    /// A delta of the new manifest's `json` from each base's manifest JSON, stored as objects.
    func manifestDeltas(to json: Data, from bases: [Publisher.DeltaBase]) throws(PatchSyncError) -> [ManifestDelta] {
        var deltas: [ManifestDelta] = []
        let jsonSHA = SHA256Hasher.hash(json).hex
        for base in bases {
            guard let delta = Publisher.manifestDelta(from: base.json, to: json) else { continue }
            let sha = SHA256Hasher.hash(delta.stored)
            do { try FileSystem.writeAtomically(delta.stored, to: OriginLayout(root: origin).objectFile(sha)) } catch {
                throw PatchSyncError.wrap(error).during("writing the manifest delta from \(base.manifest.buildId)")
            }
            deltas.append(
                ManifestDelta(
                    from: base.manifest.buildId.value, object: sha.hex, length: Int64(delta.stored.count),
                    size: delta.size, sha256: jsonSHA, jsonLength: Int64(json.count), codec: delta.codec))
        }
        return deltas
    }
}
