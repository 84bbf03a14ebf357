import Foundation

/// What `repo status` reports: each role's version and expiry, and the builds each channel lists.
public struct RepositoryStatus: Codable, Sendable {
    public struct Role: Codable, Sendable {
        public var role: String
        public var version: Int
        public var expires: Date
        public var daysLeft: Double
        public var keys: Int
        public var threshold: Int
        /// The command that signs this role again.
        public var renewal: String
    }

    public struct Build: Codable, Sendable {
        public var buildId: String
        public var sequence: Int
        public var files: Int
        public var size: Int64
        public var manifestBytes: Int64
        /// The build clients on this channel install now (the highest sequence).
        public var current: Bool
        public var promotedFrom: String?
        public var rollback: RollbackNote?
        /// A preload build: when it is to be released, and whether its key is released.
        public var releaseAt: Date?
        public var released: Bool?
        /// Who published it, when, and what it is (nil for builds published before targets recorded it).
        public var published: PublishNote?
    }

    public struct Channel: Codable, Sendable {
        public var channel: String
        /// Newest first.
        public var builds: [Build]
    }

    public var origin: String

    /// The status as told for `origin` (the bucket a cache folder mirrors): its name in the report and in
    /// the commands that renew each role.
    public func named(_ origin: String) -> RepositoryStatus {
        var status = self
        status.roles = roles.map { role in
            var role = role
            role.renewal = role.renewal.replacingOccurrences(
                of: "--origin \(self.origin) ", with: "--origin \(origin) ")
            return role
        }
        status.origin = origin
        return status
    }
    public var roles: [Role]
    public var channels: [Channel]
}

extension Repository {
    /// The days before its expiry at which `publish`, `refresh` and `check` warn about root and targets.
    public static let warningWindow: TimeInterval = 30 * 86400
    /// The least lifetime left on timestamp and snapshot before `check` says the refresh job is failing
    /// (it runs daily and signs them for 7 and 30 days).
    public static let onlineWarningWindow: TimeInterval = 2 * 86400

    /// Each role's expiry and the builds of each channel, as players read the channels
    /// (``ChannelListing``). A build's size comes from its signed target entry, or from its manifest for
    /// builds published before targets carried it.
    public func status(now: Date = Date()) throws(PatchSyncError) -> RepositoryStatus {
        let channels = ChannelListing.all(self).filter { !$0.builds.isEmpty }.map { listing in
            // The build players install: the newest installable one (a pending preload is not yet).
            let current = listing.current?.path
            return RepositoryStatus.Channel(
                channel: listing.channel, builds: listing.builds.map { status(of: $0, current: $0.path == current) })
        }
        return RepositoryStatus(origin: origin, roles: roleExpiries(now: now), channels: channels)
    }

    private func status(of build: ChannelListing.Build, current: Bool) -> RepositoryStatus.Build {
        let info = build.info
        var files = info.files, size = info.size
        if files == nil || size == nil, build.installable,  // a pending preload's manifest is sealed
            let manifest = try? listedManifest(build.path, build.file, validating: false)  // status never wedges
        {
            (files, size) = (manifest.files.count, manifest.totalSize)
        }
        return RepositoryStatus.Build(
            buildId: info.buildId, sequence: info.sequence, files: files ?? 0, size: size ?? 0,
            manifestBytes: build.file.length, current: current, promotedFrom: info.promotedFrom,
            rollback: info.rollback, releaseAt: info.preload?.releaseAt,
            released: info.preload.map { _ in build.installable }, published: info.published)
    }

    /// The roles that have expired at `now`, with how to renew each (no manifest is read).
    public func expiredRoles(now: Date = Date()) -> [RepositoryStatus.Role] {
        roleExpiries(now: now).filter { $0.expires <= now }
    }

    /// The four roles, root first, with their expiry and how to renew each.
    func roleExpiries(now: Date) -> [RepositoryStatus.Role] {
        let renewals = [
            "root": "patchsync repo renew --origin \(origin) --root-key ROOT_KEY",
            "targets": "patchsync repo renew --origin \(origin) --targets-key TARGETS_KEY --online-key ONLINE_KEY",
            "snapshot": "patchsync repo refresh --origin \(origin) --online-key ONLINE_KEY",
            "timestamp": "patchsync repo refresh --origin \(origin) --online-key ONLINE_KEY"
        ]
        let roles: [(String, Int, Date)] = [
            ("root", root.signed.version, root.signed.expires),
            ("targets", targets.signed.version, targets.signed.expires),
            ("snapshot", snapshot.signed.version, snapshot.signed.expires),
            ("timestamp", timestamp.signed.version, timestamp.signed.expires)
        ]
        return roles.map { name, version, expires in
            let spec = root.signed.roles[name]
            return RepositoryStatus.Role(
                role: name, version: version, expires: expires,
                daysLeft: (expires.timeIntervalSince(now) / 86400 * 10).rounded(.down) / 10,
                keys: spec?.keyids.count ?? 0, threshold: spec?.threshold ?? 0,
                renewal: renewals[name] ?? "")
        }
    }

    /// The roles that expire within their window from `now`: root and targets (renewed by hand) within
    /// `within`, snapshot and timestamp (re-signed by the refresh job) within `onlineWithin`.
    public func expiring(
        within: TimeInterval = Repository.warningWindow,
        onlineWithin: TimeInterval = Repository.onlineWarningWindow,
        now: Date = Date()
    ) -> [RepositoryStatus.Role] {
        roleExpiries(now: now).filter { role in
            let window = ["root", "targets"].contains(role.role) ? within : onlineWithin
            return role.expires.timeIntervalSince(now) <= window
        }
    }

    /// One warning line per role in ``expiring(within:onlineWithin:now:)``, for commands to print.
    public func expiryWarnings(now: Date = Date()) -> [String] {
        let stopped =
            onlineSignedByPreviousRoot
            ? [
                "snapshot and timestamp of \(origin) are still signed by the online key root version "
                    + "\(rootVersion) replaced (a rotation stopped half way): players on that root refuse updates "
                    + "until they are signed again; run `patchsync repo refresh --origin \(origin) --online-key NEW_ONLINE_KEY`"
            ] : []
        let targetsStopped =
            targetsSignedByCurrentKeys
            ? []
            : [
                "targets.json of \(origin) is still signed by the targets keys that root version \(rootVersion) "
                    + "replaced (a rotation stopped half way): players on that root refuse it until it is signed "
                    + "again; the next publish does, or `patchsync repo renew --origin \(origin) --targets-key "
                    + "NEW_TARGETS_KEY --online-key ONLINE_KEY`"
            ]
        return stopped + targetsStopped
            + expiring(now: now).map { role in
                let when =
                    role.daysLeft <= 0
                    ? "expired on \(Self.day(role.expires)): clients refuse the repository"
                    : "expires in \(role.daysLeft) days (\(Self.day(role.expires)))"
                return "\(role.role).json of \(origin) \(when); renew it: \(role.renewal)"
            }
    }

    static func day(_ date: Date) -> String {
        let formatter = ISO8601DateFormatter()
        formatter.formatOptions = [
            .withFullDate, .withTime, .withColonSeparatorInTime, .withDashSeparatorInDate,
            .withSpaceBetweenDateAndTime
        ]
        return formatter.string(from: date) + " UTC"
    }

    /// The manifest a target names, read from the origin and checked against its signed hash.
    func manifest(_ path: String, _ file: TargetFile) throws(PatchSyncError) -> Manifest {
        try Self.manifest(in: origin, path, file)
    }

    /// The manifest of a listed build as players read it: a plain build's, or a released preload's
    /// sealed manifest opened with the key the releases role lists. A pending preload is refused by name.
    public func listedManifest(_ path: String, _ file: TargetFile, validating: Bool = true) throws(PatchSyncError)
        -> Manifest
    {
        try Self.manifest(in: origin, path, file, released: releasedKeys, validating: validating)
    }

    /// The manifest target `path` of the origin folder `origin`, checked against its signed length and hash.
    /// A preload build's manifest is sealed: it is opened with its content key from `contentKeys` (the
    /// publisher's key folder) or, once released, from the origin (`released`: the releases role's
    /// targets); without either it is refused by name.
    static func manifest(
        in origin: String, _ path: String, _ file: TargetFile, contentKeys: String? = nil,
        released: [String: TargetFile] = [:], validating: Bool = true
    ) throws(PatchSyncError) -> Manifest {
        let data = try targetData(in: origin, path, file)
        guard let info = file.custom, info.preload != nil else {
            return try Manifest.decode(data, what: path, validating: validating)
        }
        let plan = try PreloadPlan.decode(data, what: path)
        let keyPath = contentKeys.map { contentKeyPath($0, channel: info.channel, build: info.buildId) }
        let keyData: Data
        if let keyPath, FileSystem.exists(keyPath) {
            keyData = try FileSystem.read(keyPath, limit: Int(Releases.maxKeyBytes))
        } else if let key = released[OriginLayout.keyTarget(channel: info.channel, build: info.buildId)] {
            keyData = try targetData(
                in: origin, OriginLayout.keyTarget(channel: info.channel, build: info.buildId), key)
        } else {
            throw PatchSyncError(
                .usage,
                "build \(info.buildId) of \(origin) is a preload whose manifest is sealed, and its "
                    + "content key is not at hand",
                remedy: "give the publisher's key folder (--content-keys), "
                    + "or wait for its release")
        }
        let key = try ContentKey.read(
            keyData, what: keyPath ?? "the released key of \(info.buildId)", build: info.buildId)
        return try plan.openManifest(in: origin, key: key)
    }

    /// The bytes of target `path` in the origin folder, checked against its signed length and SHA-256.
    static func targetData(in origin: String, _ path: String, _ file: TargetFile) throws(PatchSyncError) -> Data {
        guard let hash = file.hashes["sha256"] else { throw PatchSyncError(.refusedData, "\(path) has no sha256") }
        let location = OriginLayout(root: origin).path(OriginLayout.targetFile(path, sha256: hash))
        let data = try FileSystem.read(location, limit: Int(min(file.length, 256 << 20)) + 1)
        guard data.count == file.length, SHA256Hasher.hash(data).hex == hash else {
            throw PatchSyncError(
                .refusedData, "\(location) does not match its signed length and SHA-256",
                remedy: "the origin folder was changed by hand; publish the build again into a fresh origin")
        }
        return data
    }
}
