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
        /// The delta packs written for the channel's players, one per recent build of it.
        public var deltas: [Publisher.DeltaReport] = []
        public var warnings: [String] = []
    }

    /// What `repo withdraw` did.
    public struct WithdrawReport: Codable, Sendable {
        public var buildId: String
        public var channel: String
        /// True for a pending preload (its key was never released): it is simply no longer listed.
        public var wasPreload: Bool
        /// The build the channel went back to, when the one withdrawn was the channel's current build.
        public var relisted: String?
        /// The relisted build's new sequence.
        public var sequence: Int?
        public var reason: String?
        public var warnings: [String] = []
    }

    public let origin: String
    public let signers: Repository.Signers
    public var keepBuilds = Publisher.Options.defaultKeepBuilds
    /// How many of the target channel's latest builds get a delta pack to a promoted or rolled-back build.
    public var deltaSources = 2
    public var now = Date()
    /// Promote to a channel whose name is close to an existing one although it has none yet (``NewChannelCheck``).
    public var newChannel = false
    /// The publisher's content-key folder (default: the one a preload publish recorded): a pending preload
    /// of the channel is listed again above a build listed below it.
    public var contentKeys: String?

    public init(origin: String, signers: Repository.Signers) {
        self.origin = origin
        self.signers = signers
    }

    private var writer: TargetWriter {
        var writer = TargetWriter(origin: origin, signers: signers, keepBuilds: keepBuilds, now: now)
        writer.contentKeys = relisting.contentKeys
        return writer
    }

    /// Lists the channel's pending preloads again above a build listed below them.
    private var relisting: PreloadRelisting {
        PreloadRelisting(origin: origin, contentKeys: contentKeys ?? Repository.recordedContentKeys(origin: origin))
    }

    /// Lists build `build` of channel `from` on channel `to` as that channel's newest build, with delta
    /// packs and manifest deltas from `to`'s latest builds (its players come from those). Run again, it
    /// changes nothing; a different build of the same id already on `to` is refused, and so is a promotion
    /// above a pending preload of `to` (its players would never install the preload).
    public func promote(_ build: BuildID, from: Channel, to: Channel) throws(PatchSyncError) -> Report {
        var repo = try Repository.open(origin: origin, for: "promoting \(build)")
        try repo.checkSigners(signers)
        guard from != to else {
            throw PatchSyncError(
                .usage, "--from and --to are both \(from)", remedy: "promote from one channel to another")
        }
        try NewChannelCheck.check(to, repo: repo, meant: newChannel, command: "repo promote --to")
        guard let entry = ChannelListing(repo, channel: from.name).build(build.value) else {
            throw PatchSyncError(
                .usage, "channel \(from) of \(origin) lists no build \(build)",
                remedy: "see `patchsync repo status --origin \(origin)` for the builds each channel lists")
        }
        guard entry.info.preload == nil else {
            throw PatchSyncError(
                .usage, "build \(build) of \(from) is a preload: its content is sealed with a key of \(from)",
                remedy: "publish the build folder on \(to) (with --release-at for a preload there)")
        }
        var manifest = try repo.manifest(entry.path, entry.file)
        let target = Manifest.targetPath(channel: to, buildId: build)
        let listing = ChannelListing(repo, channel: to.name)
        if let existing = repo.targetFiles[target] {
            let published = try repo.manifest(target, existing)
            guard published.files == manifest.files else {
                throw PatchSyncError(
                    .usage, "channel \(to) already lists a build \(build) with other content",
                    remedy: "publish the tested build under a new --build-id, then promote that")
            }
            if listing.builds.first?.info.buildId == build.value {
                return Report(
                    buildId: build.value, channel: to.name, sequence: published.sequence, promotedFrom: from.name,
                    alreadyCurrent: true, manifestTarget: target, warnings: repo.expiryWarnings(now: now))
            }
        }
        try relisting.checkKeys(channel: to.name, repo: repo)
        manifest.channel = to
        manifest.sequence = listing.highestSequence + 1
        var report = Report(
            buildId: build.value, channel: to.name, sequence: manifest.sequence, promotedFrom: from.name,
            alreadyCurrent: false, manifestTarget: target)
        let written = try relist(
            &manifest, target: target, repo: &repo, promotedFrom: from.name, rollback: nil,
            published: entry.info.published)
        report.deltas = written.deltas
        report.warnings = written.warnings + repo.expiryWarnings(now: now)
        return report
    }

    /// Puts an earlier build back on `channel` as a new sequence, so that clients move to it with every
    /// check intact: `to`, or by default the newest earlier build that no rollback has left and whose
    /// manifest clients accept. The build left is marked withdrawn; its manifest is never read.
    public func rollback(channel: Channel, to: BuildID? = nil, reason: String? = nil) throws(PatchSyncError) -> Report {
        var repo = try Repository.open(origin: origin, for: "rolling back \(channel)")
        try repo.checkSigners(signers)
        let listing = ChannelListing(repo, channel: channel.name)
        guard let current = listing.current else {
            throw PatchSyncError(.usage, "channel \(channel) of \(origin) lists no build", remedy: "publish one first")
        }
        let left = Set(
            listing.builds.compactMap { $0.info.rollback?.from }
                + listing.builds.filter { $0.info.withdrawn == true }.map(\.info.buildId))
        if let to {
            guard let chosen = listing.build(to.value) else {
                throw PatchSyncError(
                    .usage, "channel \(channel) of \(origin) lists no build \(to)",
                    remedy:
                        "see `patchsync repo status --origin \(origin)`; builds beyond --keep-builds are no longer listed"
                )
            }
            guard to.value != current.info.buildId else {
                throw PatchSyncError(
                    .usage, "build \(to) is already the newest on \(channel)", remedy: "name an earlier build with --to"
                )
            }
            try Self.refusePending(chosen, channel: channel)
            try relisting.checkKeys(channel: channel.name, repo: repo)
            var manifest = try repo.listedManifest(chosen.path, chosen.file)
            return try rollback(
                to: chosen, &manifest, from: current, listing: listing, reason: reason, repo: &repo, warnings: [])
        }
        let (earlier, warnings) = earlierBuild(in: listing, below: current, skipping: left, repo: repo)
        if var found = earlier {
            try relisting.checkKeys(channel: channel.name, repo: repo)
            return try rollback(
                to: found.build, &found.manifest, from: current, listing: listing, reason: reason, repo: &repo,
                warnings: warnings)
        }
        throw PatchSyncError(
            .usage,
            "channel \(channel) lists no earlier build to go back to"
                + (warnings.isEmpty ? "" : " (\(warnings.joined(separator: "; ")))"),
            remedy:
                "publish a fixed build instead, name one with --to, or take the build off with `patchsync repo withdraw "
                + "\(current.info.buildId) --origin \(origin)`")
    }

    private func rollback(
        to chosen: ChannelListing.Build, _ manifest: inout Manifest, from current: ChannelListing.Build,
        listing: ChannelListing,
        reason: String?, repo: inout Repository, warnings: [String]
    ) throws(PatchSyncError) -> Report {
        manifest.sequence = listing.highestSequence + 1
        let note = RollbackNote(from: current.info.buildId, reason: reason)
        var report = Report(
            buildId: chosen.info.buildId, channel: listing.channel, sequence: manifest.sequence, rollback: note,
            alreadyCurrent: false, manifestTarget: chosen.path, warnings: warnings)
        if chosen.info.preload != nil {
            report.warnings += try putBackReleased(
                chosen, sequence: manifest.sequence, rollback: note, withdrawing: current.path, repo: &repo)
            report.warnings += repo.expiryWarnings(now: now)
            return report
        }
        let written = try relist(
            &manifest, target: chosen.path, repo: &repo, promotedFrom: chosen.info.promotedFrom, rollback: note,
            published: chosen.info.published, withdrawing: current.path)
        report.deltas = written.deltas
        report.warnings += written.warnings + repo.expiryWarnings(now: now)
        return report
    }

    /// Lists a released preload again as the channel's newest build (a rollback or a withdraw going back
    /// to it): as a preload still, its manifest sealed anew with its released key and `sequence`, so
    /// its sealed objects serve as they are; the pending preloads of the channel go above it. Returns
    /// the warnings to report.
    private func putBackReleased(
        _ chosen: ChannelListing.Build, sequence: Int, rollback note: RollbackNote, withdrawing: String? = nil,
        unlisting: [String] = [], repo: inout Repository
    ) throws(PatchSyncError) -> [String] {
        let relisting = self.relisting
        let key = try relisting.key(of: chosen, channel: chosen.info.channel, repo: repo)
        var targets = repo.targetFiles
        for path in unlisting { targets[path] = nil }
        targets[chosen.path] = try relisting.listAgain(chosen, key: key, sequence: sequence, rollback: note)
        if let withdrawing { targets[withdrawing]?.custom?.withdrawn = true }
        let relisted = try relisting.relist(channel: chosen.info.channel, above: sequence, in: &targets, repo: repo)
        try writer.commit(targets, repo: &repo)
        return relisted.map {
            "pending preload \($0) is listed again above build \(chosen.info.buildId): what players preloaded stays valid"
        }
    }

    /// Takes `build` off its channel without reading its manifest (which clients may refuse). A pending
    /// preload is unlisted, unless another listed preload shares objects sealed with its key. The channel's
    /// current build is replaced by the newest earlier build clients accept, listed again with a new
    /// sequence (as a rollback does); with none, the channel lists no installable build until the next
    /// publish. Any other build is unlisted. Its content stays in the origin for prune's grace period.
    public func withdraw(_ build: BuildID, channel: Channel? = nil, reason: String? = nil) throws(PatchSyncError)
        -> WithdrawReport
    {
        var repo = try Repository.open(origin: origin, for: "withdrawing \(build)")
        try repo.checkSigners(signers)
        let (listing, entry) = try withdrawn(build, channel: channel, repo: repo)
        var report = WithdrawReport(
            buildId: build.value, channel: listing.channel, wasPreload: entry.pending, reason: reason)
        if entry.pending, let other = listing.preloadSharingKey(of: build.value, origin: origin, pendingOnly: true) {
            throw PatchSyncError(
                .usage,
                "pending preload \(other.info.buildId) shares objects sealed with the key of \(build): "
                    + "it could never be released without \(build)",
                remedy:
                    "withdraw \(other.info.buildId) first (`patchsync repo withdraw \(other.info.buildId) --origin \(origin)`), "
                    + "or release both")
        }
        var warnings: [String] = [], unlisting: [String] = []
        var emptied: (channel: String, withdrawal: ChannelRecord.Withdrawal)?
        if !entry.pending, entry.path == listing.current?.path {
            let found: (build: ChannelListing.Build, manifest: Manifest)?
            (found, warnings) = earlierBuild(in: listing, below: entry, skipping: [], repo: repo)
            if let found {
                return try relistEarlier(
                    found, replacing: entry, of: build, in: listing, reason: reason, warnings: warnings,
                    report: report, repo: &repo)
            }
            // What stays listed must never look like a rollback to players: a build below the one withdrawn
            // (withdrawn by a rollback, or one clients refuse) is taken off with it.
            let below = listing.builds.filter { $0.installable && $0.path != entry.path }
            unlisting += below.map(\.path)
            warnings.append(
                "channel \(listing.channel) lists no installable build now"
                    + (below.isEmpty
                        ? ""
                        : " (\(below.map(\.info.buildId).joined(separator: ", ")) taken off too: none can be listed again)")
                    + ": players keep what they have, new players get nothing until you publish a build on \(listing.channel)"
            )
            emptied = (listing.channel, ChannelRecord.Withdrawal(build: build.value, reason: reason, at: now))
        }
        var targets = repo.targetFiles
        for path in unlisting { targets[path] = nil }
        targets[entry.path] = nil
        try writer.commit(targets, repo: &repo, withdrawn: emptied)
        report.warnings = warnings + repo.expiryWarnings(now: now)
        return report
    }

    /// The one listing of `build` a withdraw acts on (on `channel` when given); refused when no channel
    /// lists it, or more than one and none is named.
    private func withdrawn(_ build: BuildID, channel: Channel?, repo: Repository) throws(PatchSyncError)
        -> (ChannelListing, ChannelListing.Build)
    {
        let listings = ChannelListing.all(repo).filter {
            ($0.build(build.value) != nil) && (channel == nil || $0.channel == channel?.name)
        }
        guard let listing = listings.first, let entry = listing.build(build.value) else {
            throw PatchSyncError(
                .usage, "\(origin) lists no build \(build)" + (channel.map { " on \($0)" } ?? ""),
                remedy: "see `patchsync repo status --origin \(origin)` for the builds each channel lists")
        }
        guard listings.count == 1 else {
            throw PatchSyncError(
                .usage, "build \(build) is listed on \(listings.map(\.channel).joined(separator: " and "))",
                remedy: "name the channel to withdraw it from with --channel")
        }
        return (listing, entry)
    }

    /// Lists `found` (the newest earlier build players accept) again in place of withdrawn `entry`, with
    /// a new sequence, as a rollback does.
    private func relistEarlier(
        _ found: (build: ChannelListing.Build, manifest: Manifest), replacing entry: ChannelListing.Build,
        of build: BuildID, in listing: ChannelListing, reason: String?, warnings: [String], report: WithdrawReport,
        repo: inout Repository
    ) throws(PatchSyncError) -> WithdrawReport {
        var found = found, report = report
        try relisting.checkKeys(channel: listing.channel, repo: repo)
        found.manifest.sequence = listing.highestSequence + 1
        let note = RollbackNote(from: build.value, reason: reason ?? "build \(build.value) was withdrawn")
        if found.build.info.preload != nil {
            let relisted = try putBackReleased(
                found.build, sequence: found.manifest.sequence, rollback: note, unlisting: [entry.path],
                repo: &repo)
            report.relisted = found.build.info.buildId
            report.sequence = found.manifest.sequence
            report.warnings = warnings + relisted + repo.expiryWarnings(now: now)
            return report
        }
        let written = try relist(
            &found.manifest, target: found.build.path, repo: &repo, promotedFrom: found.build.info.promotedFrom,
            rollback: note, published: found.build.info.published, unlisting: [entry.path])
        report.relisted = found.build.info.buildId
        report.sequence = found.manifest.sequence
        report.warnings = warnings + written.warnings + repo.expiryWarnings(now: now)
        return report
    }

    /// The newest build of `listing` below `build` that can be listed again: installable (a released
    /// preload too), not in `skipping`, not withdrawn, with a manifest that reads as clients read it.
    /// Each one passed over is named in the warnings.
    private func earlierBuild(
        in listing: ChannelListing, below build: ChannelListing.Build, skipping: Set<String>, repo: Repository
    ) -> (found: (build: ChannelListing.Build, manifest: Manifest)?, warnings: [String]) {
        var warnings: [String] = []
        for earlier in listing.builds
        where earlier.installable && earlier.info.sequence < build.info.sequence
            && earlier.info.buildId != build.info.buildId
            && earlier.info.withdrawn != true && !skipping.contains(earlier.info.buildId)
        {
            do throws(PatchSyncError) {
                return ((earlier, try repo.listedManifest(earlier.path, earlier.file)), warnings)
            } catch {
                warnings.append(
                    "build \(earlier.info.buildId) was passed over: its manifest cannot be used (\(error.message))")
            }
        }
        return (nil, warnings)
    }

    private static func refusePending(_ chosen: ChannelListing.Build, channel: Channel) throws(PatchSyncError) {
        guard chosen.pending else { return }
        throw PatchSyncError(
            .usage,
            "build \(chosen.info.buildId) of \(channel) is a preload not released yet: players cannot install it",
            remedy: "name another build with --to, or release it (`patchsync repo release \(chosen.info.buildId)`)")
    }

    /// Writes `manifest` (a published build listed again on its channel with a new sequence) with the
    /// delta packs and manifest deltas its channel's players need: from the channel's latest builds,
    /// whose manifests are read leniently. Returns the delta packs written.
    private func relist(
        _ manifest: inout Manifest, target: String, repo: inout Repository, promotedFrom: String?,
        rollback: RollbackNote?, published: PublishNote?,
        withdrawing: String? = nil, unlisting: [String] = []
    ) throws(PatchSyncError) -> (deltas: [Publisher.DeltaReport], warnings: [String]) {
        let skipped = SkippedManifests()
        let bases = try Publisher.deltaBases(
            repo, origin: origin, channel: manifest.channel.name, before: .max, excluding: manifest.buildId.value,
            count: deltaSources, skipped: skipped)
        // Delta packs save players bytes; one that cannot be written (an object damaged by hand) never
        // stops the build being listed: its players fetch chunks instead.
        var packs: [(source: DeltaSource, files: [Int])] = []
        var warnings: [String] = []
        for base in bases {
            do throws(PatchSyncError) {
                packs += try Publisher.deltaPacks(
                    for: manifest.files, from: [base], into: origin, origin: origin,
                    targetFiles: ObjectReader(origin: origin, naming: ObjectNaming(format: manifest.formatVersion)),
                    format: manifest.formatVersion)
            } catch {
                warnings.append("no delta pack from \(base.manifest.buildId): \(error.message)")
            }
        }
        let fresh = Set(packs.map(\.source.from))
        let deltas = packs.map(\.source) + (manifest.deltas ?? []).filter { !fresh.contains($0.from) }
        manifest.deltas = deltas.isEmpty ? nil : deltas
        let relisted = try writer.write(
            manifest, target: target, repo: &repo, deltaBases: bases, promotedFrom: promotedFrom, rollback: rollback,
            withdrawing: withdrawing, unlisting: unlisting, published: published)
        warnings += relisted.map {
            "pending preload \($0) is listed again above build \(manifest.buildId): what players preloaded stays valid"
        }
        return (
            packs.map {
                Publisher.DeltaReport(from: $0.source.from.value, files: $0.source.files, bytes: $0.source.length)
            }, skipped.warnings + warnings
        )
    }
}
