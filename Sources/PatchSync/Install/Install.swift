import Foundation

/// A folder on the player's machine: the live tree behind `current`, complete
/// builds in `builds/`, and the agent's state in `.patchsync/`.
public struct Install: Sendable {
    public let root: String
    /// Every path inside the install: the properties below are its names.
    let layout: InstallLayout

    init(root: String) {
        self.root = root
        layout = InstallLayout(root: root)
    }

    var stateDirectory: String { layout.stateFolder }
    public var configPath: String { layout.configFile }
    var metadataDirectory: String { layout.metadataFolder }
    var manifestsDirectory: String { layout.manifestsFolder }
    var stagingDirectory: String { layout.stagingFolder }
    var databasePath: String { layout.databaseFile }
    var runningLockPath: String { layout.runningLockFile }
    var buildsDirectory: String { layout.buildsFolder }
    var trashDirectory: String { layout.trashFolder }
    /// Delta packs being downloaded or applied; removed once the build is staged.
    var deltasDirectory: String { layout.deltasFolder }
    /// What a preload fetched before its build's release: ranges of its objects, as stored (sealed).
    var preloadDirectory: String { layout.preloadFolder }
    var currentLink: String { layout.currentLink }

    func buildDirectory(_ id: String) -> String { layout.build(id) }
    func stagedDirectory(_ id: String) -> String { layout.staged(id) }
    func manifestPath(_ id: String) -> String { layout.manifest(id) }

    /// Makes `root` an install that follows `config`, trusting the root metadata at `trustedRoot`.
    public static func create(
        at root: String, config: InstallConfig,
        trustedRoot: String
    ) throws(PatchSyncError) -> Install {
        let install = Install(root: absolute(root))
        guard !FileSystem.exists(install.configPath) else {
            throw PatchSyncError(
                .usage, "\(install.root) is already an install",
                remedy: "use it as it is, or choose another folder")
        }
        let rootData = try FileSystem.read(trustedRoot, limit: Int(TrustClient.maxRootBytes))
        let parsed: Signed<RootMetadata> = try Signed(parsing: rootData, name: trustedRoot)
        guard let role = parsed.signed.roles["root"] else {
            throw PatchSyncError(.refusedData, "\(trustedRoot) defines no root role")
        }
        try parsed.verify(role: role, keys: parsed.signed.keys, name: trustedRoot)
        try Origin.checkMirrors(config.remotes)
        _ = try Channel(config.channel)
        try CaseFolding.refuse(install: install.root)
        do {
            for dir in [
                install.metadataDirectory, install.manifestsDirectory, install.stagingDirectory,
                install.buildsDirectory
            ] { try FileSystem.makeDirectory(dir) }
            install.securePrivateFolder()
            try FileSystem.writeAtomically(rootData, to: install.layout.trustedRootFile)
        } catch { throw PatchSyncError.wrap(error).during("creating install \(install.root)") }
        try install.saveConfig(config)
        _ = try StateStore(path: install.databasePath)
        return install
    }

    /// Opens an existing install, and brings `current` and the recorded live build in line when a kill or a
    /// hand left them apart (``recover()``).
    public static func open(at root: String) throws(PatchSyncError) -> Install {
        let install = Install(root: absolute(root))
        guard FileSystem.exists(install.configPath) else {
            throw PatchSyncError(
                .usage, "\(install.root) is not a PatchSync install",
                remedy: "create one with `patchsync init --install \(install.root) --remote URL --root ROOT_JSON`")
        }
        install.securePrivateFolder()
        install.recover()
        return install
    }

    public func config() throws(PatchSyncError) -> InstallConfig {
        let data = try FileSystem.read(configPath, limit: 1 << 20)
        do { return try JSONDecoder().decode(InstallConfig.self, from: data) } catch {
            throw PatchSyncError(.usage, "\(configPath) is not a valid install configuration", cause: error)
        }
    }

    /// Changes the install's configuration (`patchsync config set` does the same): a running sync applies a
    /// new bandwidth cap within a second. Changes from several processes or threads take turns, each on
    /// what the last one wrote; `change` itself must not change the configuration (it would wait for
    /// its own turn).
    ///
    /// ```swift
    /// try install.updateConfig { $0.maxBytesPerSecond = 2 << 20 }
    /// ```
    public func updateConfig(_ change: (inout InstallConfig) throws(PatchSyncError) -> Void) throws(PatchSyncError) {
        let held = configLock()
        defer { withExtendedLifetime(held) {} }
        var config = try config()
        try change(&config)
        try Origin.checkMirrors(config.remotes)
        _ = try Channel(config.channel)
        if let hours = config.playHours { _ = try PlayHours(hours) }
        for (name, value) in [
            ("maxBytesPerSecond", config.maxBytesPerSecond),
            ("discretionaryMaxBytesPerSecond", config.discretionaryMaxBytesPerSecond),
            ("maxConnections", config.maxConnections), ("keepBuilds", config.keepBuilds)
        ] {
            if let value, value <= 0 {
                throw PatchSyncError(
                    .usage, "\(name) must be more than 0, not \(value)",
                    remedy: "`patchsync config unset \(name)` restores its default (no limit for a rate)")
            }
        }
        try saveConfig(config)
    }

    /// Whether a foreground sync waits to take over from a discretionary one: it holds an flock on the
    /// request file while it waits (a request of a process that died is no request).
    func takeOverRequested() -> Bool { FileLock.isHeld(layout.takeOverFile) }

    /// Held while the configuration is read, changed and written, one change at a time (a launcher's
    /// setting beside `patchsync config set`): each reads what the last one wrote. A lock file that
    /// cannot be opened (a read-only folder) leaves the write to fail on its own.
    /// Held until the value returned is released.
    func configLock() -> FileLock? { FileLock.waitExclusive(layout.configLockFile) }

    func saveConfig(_ config: InstallConfig) throws(PatchSyncError) {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes]
        do { try FileSystem.writeAtomically(try encoder.encode(config), to: configPath) } catch {
            throw PatchSyncError.wrap(error).during("writing \(configPath)")
        }
    }

    func state(readOnly: Bool = false) throws(PatchSyncError) -> StateStore {
        try StateStore(path: databasePath, readOnly: readOnly)
    }

    /// Points `current` at `builds/<id>` in one step: a symlink under a temporary
    /// name, rename(2) over `current`, fsync of the install folder.
    func flipCurrent(to id: String) throws(PatchSyncError) {
        let temp = layout.currentTemporary(pid: getpid())
        do {
            try FileSystem.remove(temp)
            if symlink(InstallLayout.currentTarget(id), temp) != 0 { throw Errno(errno, "creating symlink", temp) }
            try FileSystem.rename(temp, currentLink)
            try FileSystem.syncDirectory(root)
        } catch { throw PatchSyncError.wrap(error).during("switching \(currentLink) to \(id)") }
    }

    /// Removes `current` (unlink(2), fsync of the install folder) when it names no complete build and none
    /// is recorded live (``reconcile(_:)``): the install has no live build until the next apply.
    func removeCurrent() throws(PatchSyncError) {
        do {
            try FileSystem.remove(currentLink)
            try FileSystem.syncDirectory(root)
        } catch { throw PatchSyncError.wrap(error).during("removing \(currentLink)") }
    }

    private static func absolute(_ path: String) -> String {
        let url = URL(fileURLWithPath: path, relativeTo: URL(fileURLWithPath: FileManager.default.currentDirectoryPath))
        return url.standardizedFileURL.path
    }
}
