import Foundation

extension Repository {
    /// The delegations targets carries: with the `releases` role (the online key, threshold 1, only
    /// `releases/*/*`, terminating) when `adding` or already there, its key kept to the root's online
    /// key. Other delegations are kept as they are.
    func releasesDelegation(online: SigningKey, adding: Bool) throws(PatchSyncError) -> Delegations? {
        let current = targets.signed.delegations
        let hasRole = current?.roles?.contains { $0.name == Releases.role } ?? false
        guard adding || hasRole else { return current }
        let id = try online.publicKey.keyID()
        var roles = (current?.roles ?? []).filter { $0.name != Releases.role }
        roles.insert(
            DelegatedRole(
                name: Releases.role, keyids: [id], threshold: 1, terminating: true,
                paths: ["releases/*/*"], pathHashPrefixes: nil), at: 0)
        var keys: [String: TUFKey] = [:]
        for role in roles {
            for keyid in role.keyids { keys[keyid] = current?.keys[keyid] ?? (keyid == id ? online.publicKey : nil) }
        }
        return Delegations(keys: keys, roles: roles, succinctRoles: current?.succinctRoles)
    }

    /// The content keys released so far: key target path → its entry.
    public var releasedKeys: [String: TargetFile] { releases?.signed.targets ?? [:] }

    /// Whether build `build` of `channel` has its content key released.
    public func isReleased(channel: String, build: String) -> Bool {
        releasedKeys[OriginLayout.keyTarget(channel: channel, build: build)] != nil
    }

    /// Whether the build a target lists is installable: not a preload, or a preload whose key is released.
    func isReleased(_ info: ManifestTargetInfo) -> Bool {
        info.preload == nil || isReleased(channel: info.channel, build: info.buildId)
    }

    /// Releases build `build` with its key file from the publisher's key folder `contentKeys`.
    public mutating func release(
        build: String, channel: String, contentKeys: String, online: SigningKey,
        now: Date = Date()
    ) throws(PatchSyncError) {
        let path = Self.contentKeyPath(contentKeys, channel: channel, build: build)
        guard FileSystem.exists(path) else {
            throw PatchSyncError(
                .usage, "no content key for \(build) at \(path)",
                remedy: "give --content-keys: the folder publish --release-at wrote the key to")
        }
        try release(
            keyFile: try FileSystem.read(path, limit: Int(Releases.maxKeyBytes)), channel: channel, build: build,
            online: online, now: now)
    }

    /// Publishes a preload build's content key (its key file's bytes) as a target of the `releases`
    /// role, signed with the online key, then new snapshot and timestamp: clients unlock the build at
    /// their next sync. The key is checked against the commitment the targets key signed first.
    public mutating func release(
        keyFile data: Data, channel: String, build: String, online: SigningKey,
        lifetimes: Lifetimes = .init(), now: Date = Date(),
        resigning: Bool = true
    ) throws(PatchSyncError) {
        try checkOnline(online)
        let target = Manifest.targetPath(channel: try Channel(channel), buildId: try BuildID(build))
        guard let file = targetFiles[target], file.custom?.preload != nil else {
            throw PatchSyncError(
                .usage, "\(origin) lists no preload build \(build) on \(channel)",
                remedy: "`patchsync repo status --origin \(origin)` lists the builds; a preload is "
                    + "published with --release-at")
        }
        let listing = ChannelListing(self, channel: channel)
        if let newer = listing.current, newer.info.sequence > (file.custom?.sequence ?? 0) {
            throw PatchSyncError(
                .usage,
                "preload \(build) of \(channel) is older than build \(newer.info.buildId), which players install now: "
                    + "released, it would never be installed",
                remedy:
                    "withdraw it (`patchsync repo withdraw \(build) --origin \(origin)`) and publish its build folder "
                    + "again under a new --build-id; nothing was released")
        }
        let plan = try Repository.plan(in: origin, target, file)
        let key = try ContentKey.read(data, what: "the key file of \(build)", build: build)
        guard plan.keys[build] == key.commitment(build: build) else {
            throw PatchSyncError(
                .refusedData, "the key file given for \(build) is not the key it was sealed with",
                remedy: "give the key file publish wrote for this build (content/\(channel)/\(build).key "
                    + "in the publisher's key folder); nothing was released")
        }
        for other in plan.keys.keys.sorted() where other != build && !isReleased(channel: channel, build: other) {
            throw PatchSyncError(
                .usage, "build \(build) shares sealed content with preload \(other), whose key is not released",
                remedy: "release \(other) first (`patchsync repo release \(other)`), or together")
        }
        try addRelease(
            data, target: OriginLayout.keyTarget(channel: channel, build: build), online: online,
            lifetimes: lifetimes, now: now)
        if resigning { try resign(key: online, lifetimes: lifetimes, now: now) }
    }

    mutating func addRelease(
        _ data: Data, target: String, online: SigningKey, lifetimes: Lifetimes,
        now: Date
    ) throws(PatchSyncError) {
        let id = try online.publicKey.keyID()
        guard let role = targets.signed.delegations?.roles?.first(where: { $0.name == Releases.role }),
            role.keyids.contains(id)
        else {
            throw PatchSyncError(
                .usage, "targets of \(origin) delegates no \(Releases.role) role to this online key",
                remedy: "re-sign targets once with the targets key (`patchsync repo renew --origin \(origin) "
                    + "--targets-key … --online-key …`): it delegates the role to the current online key")
        }
        let hash = SHA256Hasher.hash(data).hex
        try Self.write(data, to: layout.path(OriginLayout.targetFile(target, sha256: hash)))
        var files = releasedKeys
        files[target] = TargetFile(length: Int64(data.count), hashes: ["sha256": hash], custom: nil)
        try signReleases(files, online: online, lifetimes: lifetimes, now: now)
    }

    /// Writes a new version of the `releases` role's metadata with `files`, signed by the online key.
    mutating func signReleases(
        _ files: [String: TargetFile], online: SigningKey, lifetimes: Lifetimes,
        now: Date
    ) throws(PatchSyncError) {
        // Past any version on disk too: one written by a run that stopped before its snapshot may have
        // been uploaded already, and a versioned file never gets other bytes.
        let onDisk =
            ((try? FileSystem.list(layout.metadataFolder)) ?? []).compactMap { name -> Int? in
                OriginLayout.version(ofMetadataName: name, role: Releases.role)
            }.max() ?? 0
        let next = try Signed(
            signing: TargetsMetadata(
                version: max(releases?.signed.version ?? 0, onDisk) + 1,
                expires: now + lifetimes.targets, targets: files), with: [online])
        try Self.write(next, to: layout.path(OriginLayout.metadata(role: Releases.role, version: next.signed.version)))
        releases = next
    }

    /// The preload builds whose release time has come (by `now`) and whose key is not released yet.
    public func dueReleases(now: Date) -> [(channel: String, build: String, releaseAt: Date)] {
        // A preload a newer build left behind is never released: `repo check` names it.
        ChannelListing.all(self).flatMap { listing in
            listing.pendingPreloads.compactMap { build -> (String, String, Date)? in
                guard let releaseAt = build.info.preload?.releaseAt, releaseAt <= now, build.info.withdrawn != true
                else { return nil }
                return (listing.channel, build.info.buildId, releaseAt)
            }
        }.sorted { $0.2 < $1.2 }
    }

    /// The preload plan of target `path` as the origin holds it, checked against its signed length and hash.
    static func plan(in origin: String, _ path: String, _ file: TargetFile) throws(PatchSyncError) -> PreloadPlan {
        let data = try targetData(in: origin, path, file)
        return try PreloadPlan.decode(data, what: path)
    }

    /// The content-key folder a publish of `origin` recorded (``OriginLayout/contentKeysRecord``), if any.
    public static func recordedContentKeys(origin: String) -> String? {
        guard
            let data = try? FileSystem.read(
                OriginLayout(root: origin).path(OriginLayout.contentKeysRecord), limit: 64 << 10),
            let line = String(data: data, encoding: .utf8)?.trimmingCharacters(in: .whitespacesAndNewlines),
            !line.isEmpty
        else { return nil }
        return line
    }

    /// Records `folder` as the content-key folder of `origin`'s preloads, as an absolute path.
    static func recordContentKeys(origin: String, folder: String) throws(PatchSyncError) {
        let absolute = URL(fileURLWithPath: folder).standardizedFileURL.path
        guard recordedContentKeys(origin: origin) != absolute else { return }
        do {
            try FileSystem.writeAtomically(
                Data((absolute + "\n").utf8), to: OriginLayout(root: origin).path(OriginLayout.contentKeysRecord))
        } catch {
            throw PatchSyncError.wrap(error).during("recording the content-key folder of \(origin)")
        }
    }

    /// Where publish keeps a preload build's content key: `<folder>/<channel>/<build>.key`.
    public static func contentKeyPath(_ folder: String, channel: String, build: String) -> String {
        "\(folder)/\(channel)/\(build).key"
    }
}
