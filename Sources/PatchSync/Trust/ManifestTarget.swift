import Foundation

/// A channel's build manifest as signed targets metadata lists it.
struct ManifestTarget: Sendable {
    let path: String
    let file: TargetFile
    let info: ManifestTargetInfo

    /// The target of `build` on `channel`, or the channel's newest (highest sequence) when `build` is nil.
    init(in targets: TargetsMetadata, channel: Channel, build: String? = nil) throws(PatchSyncError) {
        let candidates = targets.targets.compactMap { entry -> ManifestTarget? in
            guard let info = entry.value.custom, info.channel == channel.name,
                let id = try? BuildID(info.buildId), entry.key == Manifest.targetPath(channel: channel, buildId: id),
                build == nil || build == info.buildId
            else { return nil }
            return ManifestTarget(path: entry.key, file: entry.value, info: info)
        }
        guard let newest = candidates.max(by: { $0.info.sequence < $1.info.sequence }) else {
            if build == nil,
                let withdrawal = targets.targets[ChannelRecord.targetPath(channel: channel.name)]?.channelRecord?
                    .withdrawn
            {
                throw PatchSyncError(
                    .deferred,
                    "channel \(channel) lists no build: the publisher withdrew build \(withdrawal.build)"
                        + (withdrawal.reason.map { " (\($0))" } ?? ""),
                    remedy:
                        "the installed build stays as it is; sync again later, when a build is published on \(channel)",
                    reason: .withdrawn)
            }
            throw PatchSyncError(
                .originUnavailable, "the origin has no build \(build ?? "") on channel \(channel)",
                remedy: "publish one with `patchsync publish … --channel \(channel)`, or check --channel")
        }
        self = newest
    }

    /// Every build target of `channel`, newest (highest sequence) first.
    static func all(in targets: TargetsMetadata, channel: Channel) -> [ManifestTarget] {
        targets.targets.compactMap { entry -> ManifestTarget? in
            guard let info = entry.value.custom, info.channel == channel.name, let id = try? BuildID(info.buildId),
                entry.key == Manifest.targetPath(channel: channel, buildId: id)
            else { return nil }
            return ManifestTarget(path: entry.key, file: entry.value, info: info)
        }.sorted { $0.info.sequence > $1.info.sequence }
    }

    private init(path: String, file: TargetFile, info: ManifestTargetInfo) {
        self.path = path
        self.file = file
        self.info = info
    }
}

extension Origin {
    /// Downloads a manifest target, checks it against the length and SHA-256 that targets metadata
    /// signs and against its custom fields; returns it with its bytes.
    func manifest(_ target: ManifestTarget) async throws(PatchSyncError) -> (Manifest, Data) {
        guard let sha = target.file.hashes["sha256"] else {
            throw PatchSyncError(.refusedData, "target \(target.path) has no sha256")
        }
        if let preload = target.info.preload {
            throw PatchSyncError(
                .usage,
                "build \(target.info.buildId) is a preload: its manifest is sealed until its release "
                    + "(\(Repository.day(preload.releaseAt)))",
                remedy: "compare with an earlier build, or after the release")
        }
        let consistent = OriginLayout.targetFile(target.path, sha256: sha)
        let data = try await signed(consistent, length: target.file.length, sha256: sha)
        let manifest = try Manifest.decode(data, what: consistent)
        try manifest.check(matches: target.info, what: consistent)
        return (manifest, data)
    }
}

extension Manifest {
    /// Refuses a manifest (`what`: where it came from) that describes another build than its signed target
    /// entry: another build id, channel or sequence. The one check of it, for every way a manifest arrives.
    func check(matches target: ManifestTargetInfo, what: String) throws(PatchSyncError) {
        guard buildId.value == target.buildId, channel.name == target.channel, sequence == target.sequence else {
            throw PatchSyncError(
                .refusedData,
                "\(what) describes build \(buildId) of \(channel) (sequence \(sequence)), not the signed target's "
                    + "\(target.buildId) of \(target.channel) (sequence \(target.sequence))",
                remedy: "nothing was installed; the origin serves a manifest its signed metadata does not vouch for: "
                    + "report it to the publisher")
        }
    }
}
