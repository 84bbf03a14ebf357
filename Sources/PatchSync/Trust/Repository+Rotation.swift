import Foundation

extension Repository {
    /// What a new root version changes: nil keeps the current keys (and threshold) of that role.
    public struct RootChange: Sendable {
        public var root: [TUFKey]?
        public var rootThreshold: Int?
        public var targets: [TUFKey]?
        public var targetsThreshold: Int?
        public var online: TUFKey?
        public init(
            root: [TUFKey]? = nil, rootThreshold: Int? = nil, targets: [TUFKey]? = nil,
            targetsThreshold: Int? = nil, online: TUFKey? = nil
        ) {
            self.root = root
            self.rootThreshold = rootThreshold
            self.targets = targets
            self.targetsThreshold = targetsThreshold
            self.online = online
        }
        var isEmpty: Bool {
            root == nil && rootThreshold == nil && targets == nil && targetsThreshold == nil && online == nil
        }
    }

    /// Signs root version N+1 with the keys `change` gives (nothing changed: the root's renewal with a
    /// fresh expiry). It is signed by a threshold of the current root keys and of the new ones, both in
    /// `signers.root`, so clients that trust version N accept it. New targets keys re-sign targets at once
    /// (`signers.targets`, plus the online key for snapshot and timestamp); a new online key re-signs
    /// snapshot and timestamp, and clients forget their trusted timestamp and snapshot (fast-forward
    /// recovery) when they see it.
    public mutating func rotateRoot(
        _ change: RootChange, signers: Signers,
        lifetimes: Lifetimes = .init(), now: Date = Date()
    ) throws(PatchSyncError) {
        let current = root.signed
        let oldSigners = try Self.signing(signers.root, role: "root", of: current, origin: origin, ignoringOthers: true)
        let keySet = try nextKeys(change)
        let next = try Self.rootMetadata(version: current.version + 1, expires: now + lifetimes.root, keys: keySet)
        let newSigners = try Self.signing(signers.root, role: "root", of: next, origin: origin, ignoringOthers: true)
        var all = oldSigners, ids = Set<String>()
        for key in oldSigners { ids.insert(try key.publicKey.keyID()) }
        for key in newSigners where ids.insert(try key.publicKey.keyID()).inserted { all.append(key) }
        let onlineRotated = next.roles["timestamp"] != current.roles["timestamp"]
        let releasesDelegated = targets.signed.delegations?.roles?.contains { $0.name == Releases.role } ?? false
        // The releases role names the online key: a new one is delegated to by a targets signature.
        let targetsChanged =
            next.roles["targets"] != current.roles["targets"] || !targetsSignedByCurrentKeys
            || (onlineRotated && releasesDelegated)
        try checkOnlineRotation(change, next: next, releasesDelegated: releasesDelegated, signers: signers)
        let onlineChanged = next.roles["timestamp"] != current.roles["timestamp"]
        // Every key the re-signing needs is checked before anything is written.
        let after = Repository(
            origin: origin, root: try Signed(signing: next, with: all), targets: targets,
            snapshot: snapshot, timestamp: timestamp)
        if targetsChanged {
            try after.checkSigners(signers)
        } else if onlineChanged {
            guard let online = signers.online else {
                throw PatchSyncError(
                    .usage, "a new online key must re-sign snapshot and timestamp",
                    remedy: "give its key file (--new-online-key)")
            }
            try after.checkOnline(online)
        }
        try Self.write(after.root, to: layout.path(OriginLayout.metadata(role: "root", version: next.version)))
        try Self.write(after.root, to: layout.rootMetadataFile)
        root = after.root
        if targetsChanged {
            try commit(targets: targets.signed.targets, signers: signers, lifetimes: lifetimes, now: now)
        } else if onlineChanged, let online = signers.online {
            try resign(key: online, lifetimes: lifetimes, now: now)
        }
    }

    /// The keys of root version N+1: those `change` gives, the current ones for the rest.
    private func nextKeys(_ change: RootChange) throws(PatchSyncError) -> KeySet {
        let current = root.signed
        func keys(_ role: String) -> [TUFKey] { (current.roles[role]?.keyids ?? []).compactMap { current.keys[$0] } }
        let rootKeys = change.root ?? keys("root"), targetsKeys = change.targets ?? keys("targets")
        guard let onlineKey = change.online ?? keys("timestamp").first else {
            throw PatchSyncError(.refusedData, "the root of \(origin) names no timestamp key")
        }
        let keySet = KeySet(
            root: rootKeys,
            rootThreshold: change.rootThreshold
                ?? (change.root == nil ? current.roles["root"]?.threshold : nil),
            targets: targetsKeys,
            targetsThreshold: change.targetsThreshold
                ?? (change.targets == nil ? current.roles["targets"]?.threshold : nil),
            online: onlineKey)
        return keySet
    }

    /// Refuses a new online key that would leave the old one able to sign targets, or that cannot take
    /// over the releases role without a targets signature.
    private func checkOnlineRotation(
        _ change: RootChange, next: RootMetadata, releasesDelegated: Bool, signers: Signers
    ) throws(PatchSyncError) {
        let current = root.signed
        if change.online != nil, change.targets == nil, let oldOnline = current.roles["timestamp"]?.keyids,
            next.roles["targets"]?.keyids.contains(where: oldOnline.contains) == true
        {
            throw PatchSyncError(
                .usage,
                "the online key being replaced also signs targets in \(origin): whoever holds it "
                    + "could still ship builds",
                remedy: "give --new-targets-key as well (`patchsync keygen "
                    + "--out NEW --role targets`)")
        }
        if next.roles["timestamp"] != current.roles["timestamp"], releasesDelegated, signers.targets.isEmpty {
            throw PatchSyncError(
                .usage,
                "\(origin) has preloads, whose releases role is delegated to the online key: a new "
                    + "online key needs a targets signature to take it over", remedy: "give --targets-key as well")
        }
    }
}
