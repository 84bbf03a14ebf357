import Foundation

/// One channel as signed targets metadata lists it, read the way players read it: the builds newest
/// (highest sequence) first, which of them a player can install (a plain build, or a preload whose key
/// the releases role lists) and which are pending preloads (sealed, key not released). Publish, promote,
/// rollback, withdraw, prune, release and `repo check` decide on this one listing.
public struct ChannelListing: Sendable {
    /// One listed build: its target, and whether players may install it.
    @dynamicMemberLookup
    public struct Build: Sendable {
        public let target: ManifestTarget
        /// A plain build, or a preload whose content key is released.
        public var installable: Bool
        /// A preload whose key is not released yet.
        public var pending: Bool { !installable }

        /// The target's path, file and custom fields.
        public subscript<T>(dynamicMember member: KeyPath<ManifestTarget, T>) -> T { target[keyPath: member] }
    }

    public let channel: String
    /// Newest (highest sequence) first.
    public let builds: [Build]

    /// The origin folder, where origins written before the channel records kept the highest sequence
    /// each channel ever listed (`.sequences.json`, read still).
    private let origin: String
    /// The channel's signed record (``ChannelRecord``), when targets holds one.
    public let record: ChannelRecord?

    public init(_ repo: Repository, channel: String) {
        self.channel = channel
        origin = repo.origin
        builds = Self.builds(repo.targetFiles, channel: channel, released: repo.isReleased)
        record = repo.targetFiles[ChannelRecord.targetPath(channel: channel)]?.channelRecord
    }

    /// The sequences recorded in `origin` by channel.
    static func recordedSequences(origin: String) -> [String: Int] {
        guard
            let data = try? FileSystem.read(
                OriginLayout(root: origin).path(OriginLayout.sequencesRecord), limit: 1 << 20),
            let record = try? JSONDecoder().decode([String: Int].self, from: data)
        else { return [:] }
        return record
    }

    /// The highest sequence of each channel that `before` (the targets signed now, with their records)
    /// lists or records, `after` lists, or an older origin's `.sequences.json` recorded.
    static func highestSequences(origin: String, _ before: [String: TargetFile], _ after: [String: TargetFile])
        -> [String: Int]
    {
        var highest = recordedSequences(origin: origin)
        for record in ChannelRecord.all(in: before).values {
            highest[record.channel] = max(highest[record.channel] ?? 0, record.highestSequence)
        }
        for info in (Array(before.values) + Array(after.values)).compactMap(\.custom) {
            highest[info.channel] = max(highest[info.channel] ?? 0, info.sequence)
        }
        return highest
    }

    /// The build targets `targets` lists on `channel`, newest (highest sequence) first: the one reading
    /// of a channel, for players and publisher alike. A target counts where its custom fields name the
    /// channel and a valid build, and its path is that build's manifest path.
    static func targets(_ targets: [String: TargetFile], channel: String) -> [ManifestTarget] {
        guard let name = try? Channel(channel) else { return [] }
        return targets.compactMap { path, file -> ManifestTarget? in
            guard let info = file.custom, info.channel == channel, let id = try? BuildID(info.buildId),
                path == Manifest.targetPath(channel: name, buildId: id)
            else { return nil }
            return ManifestTarget(path: path, file: file, info: info)
        }.sorted { $0.info.sequence > $1.info.sequence }
    }

    static func builds(_ targets: [String: TargetFile], channel: String, released: (ManifestTargetInfo) -> Bool)
        -> [Build]
    {
        Self.targets(targets, channel: channel).map { Build(target: $0, installable: released($0.info)) }
    }

    /// Every channel the repository lists a build on or keeps a record of (one a withdraw emptied), by name.
    public static func all(_ repo: Repository) -> [ChannelListing] {
        Set(repo.targetFiles.values.compactMap { $0.custom?.channel } + ChannelRecord.all(in: repo.targetFiles).keys)
            .sorted()
            .map { ChannelListing(repo, channel: $0) }
    }

    /// The build players of this channel install now: the newest installable one.
    public var current: Build? { builds.first { $0.installable } }

    /// The preloads players fetch beside the current build: pending, and newer than every installable
    /// build (a pending preload below an installable build is never installed).
    public var pendingPreloads: [Build] {
        builds.filter { $0.pending && $0.info.sequence > (current?.info.sequence ?? 0) }
    }

    /// Pending preloads that a newer installable build left behind: players never install them.
    public var strandedPreloads: [Build] { builds.filter(isStranded) }

    /// The highest sequence the channel lists (preloads too) or ever listed (its signed record): the next
    /// build listed takes one more, so players who saw a withdrawn build never see a sequence go back.
    public var highestSequence: Int {
        max(
            builds.first?.info.sequence ?? 0, record?.highestSequence ?? 0,
            Self.recordedSequences(origin: origin)[channel] ?? 0)
    }

    /// Whether `build` is a pending preload a newer installable build left behind: players never install it.
    public func isStranded(_ build: Build) -> Bool {
        build.pending && build.info.sequence < (current?.info.sequence ?? 0)
    }

    /// A listed preload (pending only, when `pendingOnly`) other than `build` whose plan commits to
    /// `build`'s content key: it shares objects sealed with that key. A plan that cannot be read counts
    /// as sharing: a key is kept, never lost, when in doubt.
    public func preloadSharingKey(of build: String, origin: String, pendingOnly: Bool) -> Build? {
        builds.first { other in
            guard other.info.preload != nil, other.info.buildId != build, !pendingOnly || other.pending else {
                return false
            }
            guard let plan = try? Repository.plan(in: origin, other.path, other.file) else { return true }
            return plan.keys[build] != nil
        }
    }

    /// The listed build `build`.
    public func build(_ build: String) -> Build? { builds.first { $0.info.buildId == build } }
}
