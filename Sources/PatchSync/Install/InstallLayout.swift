import Foundation

/// Every path inside an install, and the parse of the names it gives: the one place that spells them.
///
/// ```
/// <install>/
///   current -> builds/<deployment>     the live tree, flipped by one rename of `.current.tmp-<pid>`
///   builds/<deployment>/               complete, verified trees (live, previous, kept for rollback)
///   live-bundles.json                  the live build and its bundles, for the game
///   .patchsync/                        the agent's state, private to the owner (0700)
///     config.json                      remotes, channel, policy
///     state.db                         SQLite: install state, staging progress, stat cache
///     lock, staging.lock, running.lock the live tree's, the staging area's, "a game is running"
///     metadata/                        trusted TUF metadata (root.json, timestamp.json, …)
///     manifests/<deployment>.json.gz   the manifest of each deployment kept
///     staging/<deployment>/            a deployment being assembled, or ready
///     trash/<deployment>-<n>/          builds an apply retired, deleted by ``Housekeeping``
///     deltas/<object>                  delta packs being fetched or applied (`<object>.open` while one opens)
///     preload/<object>.<offset>.<length>, plan.<sha256>   a preload's ranges (`.part` while fetched), its plan
/// ```
///
/// A deployment is named by its build id, or `<build id>@<n>` (``Deployment``). Every deletion under
/// `.patchsync/` is ``Housekeeping``'s.
struct InstallLayout: Sendable, Equatable {
    /// The install folder (absolute).
    let root: String

    init(root: String) { self.root = root }

    // MARK: the install folder

    /// `builds/`: complete trees, named by deployment.
    static let buildsFolderName = "builds"
    var buildsFolder: String { root + "/" + Self.buildsFolderName }
    func build(_ deployment: String) -> String { buildsFolder + "/" + deployment }

    /// `current`: the symlink to the live build.
    var currentLink: String { root + "/current" }

    /// What `current` points at for `deployment`: relative (`builds/<deployment>`), so the install can move.
    static func currentTarget(_ deployment: String) -> String { buildsFolderName + "/" + deployment }

    /// The deployment a target of `current` names (its last component).
    static func deployment(ofCurrentTarget target: String) -> String { (target as NSString).lastPathComponent }

    /// The link that replaces `current` in one rename, under the writer's process id.
    func currentTemporary(pid: Int32) -> String { root + "/.current.tmp-\(pid)" }

    /// `live-bundles.json`: the live build and its bundles, for the game to read at run time.
    var liveBundlesFile: String { root + "/live-bundles.json" }

    // MARK: .patchsync

    /// `.patchsync`: the agent's state.
    var stateFolder: String { root + "/.patchsync" }
    var configFile: String { stateFolder + "/config.json" }
    /// Written by a foreground sync waiting for a discretionary one to stop: its pid.
    var takeOverFile: String { stateFolder + "/take-over" }
    /// Held (flock) while the configuration is read, changed and written: two changes never lose one.
    var configLockFile: String { stateFolder + "/config.lock" }
    /// The running (or last) sync's events, one JSON line each, then its result: what `sync --attach` follows.
    var eventLogFile: String { stateFolder + "/sync-events.jsonl" }
    var databaseFile: String { stateFolder + "/state.db" }

    /// The lock file of one of the install's exclusive locks (``InstallLockKind``).
    func lockFile(_ kind: InstallLockKind) -> String {
        stateFolder + "/" + (kind == .staging ? "staging.lock" : "lock")
    }

    var liveLockFile: String { lockFile(.live) }
    var runningLockFile: String { stateFolder + "/running.lock" }

    /// `metadata/`: the trusted TUF metadata, under the names ``OriginLayout`` gives (``TrustClient``).
    var metadataFolder: String { stateFolder + "/metadata" }
    /// The trusted root an install starts from (`patchsync init --root`).
    var trustedRootFile: String { metadataFolder + "/" + OriginLayout.rootName }

    /// `manifests/`: the manifest each kept deployment holds.
    var manifestsFolder: String { stateFolder + "/manifests" }
    func manifest(_ deployment: String) -> String { manifestsFolder + "/" + deployment + ".json.gz" }
    /// The same manifest decoded, ready to load (``ManifestCache``).
    func manifestCache(_ deployment: String) -> String { manifestsFolder + "/" + deployment + ".bin" }

    /// The names in `manifests/` that belong to `deployment`: its manifest, its cache, and the bundle
    /// record older versions kept beside it.
    static func manifestNames(of deployment: String) -> [String] {
        [deployment + ".json.gz", deployment + ".bin", deployment + ".bundles"]
    }

    /// `staging/`: deployments being assembled, and the ready one.
    var stagingFolder: String { stateFolder + "/staging" }
    func staged(_ deployment: String) -> String { stagingFolder + "/" + deployment }

    /// `recycled/<deployment>/`: files of the recycled build that the deployment staged in its folder does
    /// not keep where they were, moved out of its way; sources to link from while it is staged.
    var recycledFolder: String { stateFolder + "/recycled" }

    /// The path in `builds/` of `path` inside a staged deployment (the folder an apply moved it to); nil
    /// for a path outside `staging/`.
    func buildPath(ofStaged path: String) -> String? {
        guard path.hasPrefix(stagingFolder + "/") else { return nil }
        return buildsFolder + path.dropFirst(stagingFolder.count)
    }

    /// `trash/`: builds an apply retired, each under its deployment name and a random tag (a name may
    /// be retired twice before housekeeping runs).
    var trashFolder: String { stateFolder + "/trash" }
    func trashed(_ deployment: String, tag: UInt32) -> String { trashFolder + "/\(deployment)-\(tag)" }

    /// `deltas/`: delta packs being downloaded or applied, named by object; removed once the build is staged.
    var deltasFolder: String { stateFolder + "/deltas" }
    func deltaPack(_ object: SHA256Digest) -> String { deltasFolder + "/" + object.hex }

    /// The name a sealed object is opened under before it takes `path`.
    static func opening(_ path: String) -> String { path + ".open" }

    /// `preload/`: what a preload fetched before its build's release (ranges of its objects, as stored
    /// and sealed) and its plan.
    var preloadFolder: String { stateFolder + "/preload" }
    func preloadPlanFile(_ sha: String) -> String { preloadFolder + "/" + Self.preloadPlanName(sha) }

    /// The name of the file in `preload/` that keeps the plan whose gzip'd JSON has the SHA-256 `sha`.
    static func preloadPlanName(_ sha: String) -> String { "plan." + sha }

    /// The name of the file in `preload/` that holds bytes `offset..<offset+length` of `object` as stored.
    static func preloadRangeName(object: SHA256Digest, offset: Int64, length: Int64) -> String {
        "\(object.hex).\(offset).\(length)"
    }

    /// The range a name in `preload/` holds; nil for any other name (a plan, a part).
    static func preloadRange(named name: String) -> (object: SHA256Digest, offset: Int64, length: Int64)? {
        let parts = name.split(separator: ".")
        guard parts.count == 3, let object = SHA256Digest(hex: String(parts[0])), let offset = Int64(parts[1]),
            let length = Int64(parts[2])
        else { return nil }
        return (object, offset, length)
    }

    /// The name a download takes until its bytes are checked.
    static func partial(_ path: String) -> String { path + ".part" }

    /// The name a partial download takes once checked; nil for a name that is not one.
    static func completed(ofPartial name: String) -> String? {
        name.hasSuffix(".part") ? String(name.dropLast(5)) : nil
    }

    // MARK: writers' temporary files

    /// Whether `name` is a temporary file (`NAME.tmp-PID`, ``FileSystem/writeAtomically(_:to:mode:)``) of any writer.
    static func isTemporary(_ name: String) -> Bool { name.range(of: ".tmp-") != nil }

    /// The process id of the writer of temporary file `name` (`NAME.tmp-PID`); nil for another name.
    static func temporaryWriter(of name: String) -> Int32? {
        guard let range = name.range(of: ".tmp-", options: .backwards) else { return nil }
        return Int32(name[range.upperBound...])
    }
}
