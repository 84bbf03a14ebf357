import Foundation

/// A channel's build manifest as signed targets metadata lists it.
public struct ManifestTarget: Sendable {
    public let path: String
    public let file: TargetFile
    public let info: ManifestTargetInfo

    /// The target of `build` on `channel`, or the channel's newest (highest sequence) when `build` is nil.
    init(in targets: TargetsMetadata, channel: Channel, build: String? = nil) throws(PatchSyncError) {
        guard
            let newest = Self.all(in: targets, channel: channel).first(where: {
                build == nil || build == $0.info.buildId
            })
        else {
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

    /// Every build target of `channel`, newest (highest sequence) first (``ChannelListing`` reads them).
    static func all(in targets: TargetsMetadata, channel: Channel) -> [ManifestTarget] {
        ChannelListing.targets(targets.targets, channel: channel.name)
    }

    init(path: String, file: TargetFile, info: ManifestTargetInfo) {
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
