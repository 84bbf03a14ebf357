import Foundation

/// Moving builds between channels without publishing them again: `repo promote` and `repo rollback`.
/// Both write one new manifest (the same files, chunks and objects, with the channel and a new
/// sequence) and sign new targets; nothing is chunked and no content object is written.
public struct Release: Sendable {
    /// What a promotion or a rollback did.
    public struct Report: Codable, Sendable {
        public var buildId: String
        public var channel: String
        public var sequence: Int
        /// The channel promoted from, for a promotion.
        public var promotedFrom: String?
        /// The build rolled back from, and why, for a rollback.
        public var rollback: RollbackNote?
        /// True when the build was already the channel's (a promotion run again): nothing was written.
        public var alreadyCurrent: Bool
        public var manifestTarget: String
        public var warnings: [String] = []
    }

    public let origin: String
    public let signers: Repository.Signers
    public var keepBuilds = Publisher.Options.defaultKeepBuilds
    public var now = Date()

    public init(origin: String, signers: Repository.Signers) {
        self.origin = origin
        self.signers = signers
    }

    /// Lists build `build` of channel `from` on channel `to` as that channel's newest build. Run again,
    /// it changes nothing; a different build of the same id already on `to` is refused.
    public func promote(_ build: BuildID, from: Channel, to: Channel) throws(PatchSyncError) -> Report {
        var repo = try Repository.open(origin: origin, for: "promoting \(build)")
        try repo.checkSigners(signers)
        guard from != to else {
            throw PatchSyncError(.usage, "--from and --to are both \(from)", remedy: "promote from one channel to another")
        }
        let source = Manifest.targetPath(channel: from, buildId: build)
        guard let file = repo.targetFiles[source] else {
            throw PatchSyncError(
                .usage, "channel \(from) of \(origin) lists no build \(build)",
                remedy: "see `patchsync repo status --origin \(origin)` for the builds each channel lists")
        }
        guard file.custom?.preload == nil else {
            throw PatchSyncError(
                .usage, "build \(build) of \(from) is a preload: its content is sealed with a key of \(from)",
                remedy: "publish the build folder on \(to) (with --release-at for a preload there)")
        }
        var manifest = try repo.manifest(source, file)
        let target = Manifest.targetPath(channel: to, buildId: build)
        let newest = Self.builds(repo, on: to).first
        if let existing = repo.targetFiles[target] {
            let published = try repo.manifest(target, existing)
            guard published.files == manifest.files else {
                throw PatchSyncError(
                    .usage, "channel \(to) already lists a build \(build) with other content",
                    remedy: "publish the tested build under a new --build-id, then promote that")
            }
            if newest?.info.buildId == build.value {
                return Report(
                    buildId: build.value, channel: to.name, sequence: published.sequence, promotedFrom: from.name,
                    alreadyCurrent: true, manifestTarget: target, warnings: repo.expiryWarnings(now: now))
            }
        }
        manifest.channel = to
        manifest.sequence = (newest?.info.sequence ?? 0) + 1
        try write(manifest, target: target, repo: &repo, promotedFrom: from.name, rollback: nil)
        return Report(
            buildId: build.value, channel: to.name, sequence: manifest.sequence, promotedFrom: from.name,
            alreadyCurrent: false, manifestTarget: target, warnings: repo.expiryWarnings(now: now))
    }

    /// Puts an earlier build back on `channel` as a new sequence, so that clients move to it with every
    /// check intact: `to`, or by default the newest earlier build that no rollback has left.
    public func rollback(channel: Channel, to: BuildID? = nil, reason: String? = nil) throws(PatchSyncError) -> Report {
        var repo = try Repository.open(origin: origin, for: "rolling back \(channel)")
        try repo.checkSigners(signers)
        let builds = Self.builds(repo, on: channel)
        guard let current = builds.first else {
            throw PatchSyncError(.usage, "channel \(channel) of \(origin) lists no build", remedy: "publish one first")
        }
        let left = Set(builds.compactMap { $0.info.rollback?.from } + builds.filter { $0.info.withdrawn == true }.map(\.info.buildId))
        let chosen: (path: String, file: TargetFile, info: ManifestTargetInfo)?
        if let to {
            chosen = builds.first { $0.info.buildId == to.value }
            guard chosen != nil else {
                throw PatchSyncError(
                    .usage, "channel \(channel) of \(origin) lists no build \(to)",
                    remedy: "see `patchsync repo status --origin \(origin)`; builds beyond --keep-builds are no longer listed")
            }
            guard to.value != current.info.buildId else {
                throw PatchSyncError(.usage, "build \(to) is already the newest on \(channel)", remedy: "name an earlier build with --to")
            }
        } else {
            chosen = builds.dropFirst().first { $0.info.buildId != current.info.buildId && !left.contains($0.info.buildId) }
        }
        guard let chosen else {
            throw PatchSyncError(
                .usage, "channel \(channel) lists no earlier build to go back to",
                remedy: "publish a fixed build instead, or name one with --to")
        }
        guard chosen.info.preload == nil else {
            throw PatchSyncError(
                .usage,
                "build \(chosen.info.buildId) of \(channel) was published as a preload: its content is "
                    + "sealed, and a rollback would list it as a plain build",
                remedy: "name another build with --to, "
                    + "or publish the build folder again under a new --build-id")
        }
        var manifest = try repo.manifest(chosen.path, chosen.file)
        manifest.sequence = current.info.sequence + 1
        let note = RollbackNote(from: current.info.buildId, reason: reason)
        try write(
            manifest, target: chosen.path, repo: &repo, promotedFrom: chosen.info.promotedFrom, rollback: note,
            withdrawing: current.path)
        return Report(
            buildId: chosen.info.buildId, channel: channel.name, sequence: manifest.sequence, rollback: note,
            alreadyCurrent: false, manifestTarget: chosen.path, warnings: repo.expiryWarnings(now: now))
    }

    /// The builds `channel` lists, newest (highest sequence) first.
    static func builds(_ repo: Repository, on channel: Channel) -> [(path: String, file: TargetFile, info: ManifestTargetInfo)] {
        repo.targetFiles.compactMap { path, file in
            guard let info = file.custom, info.channel == channel.name else { return nil }
            return (path, file, info)
        }.sorted { $0.info.sequence > $1.info.sequence }
    }

    private func write(
        _ manifest: Manifest, target: String, repo: inout Repository, promotedFrom: String?,
        rollback: RollbackNote?, withdrawing: String? = nil
    ) throws(PatchSyncError) {
        var options = Publisher.Options(
            buildDirectory: "", origin: origin, buildId: manifest.buildId,
            bundles: try BundleRules(bundles: manifest.bundles))
        options.channel = manifest.channel
        options.keepBuilds = keepBuilds
        options.now = now
        let publisher = Publisher(options: options, signers: signers)
        try publisher.writeManifest(
            manifest, target: target, repo: &repo,
            deltaBases: try publisher.deltaBases(repo, sequence: manifest.sequence),
            promotedFrom: promotedFrom, rollback: rollback, withdrawing: withdrawing)
    }
}
