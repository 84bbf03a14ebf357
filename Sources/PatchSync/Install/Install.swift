import Foundation

/// A folder on the player's machine: the live tree behind `current`, complete
/// builds in `builds/`, and the agent's state in `.patchsync/`.
public struct Install: Sendable {
    public let root: String

    var stateDirectory: String { root + "/.patchsync" }
    public var configPath: String { stateDirectory + "/config.json" }
    var metadataDirectory: String { stateDirectory + "/metadata" }
    var manifestsDirectory: String { stateDirectory + "/manifests" }
    var stagingDirectory: String { stateDirectory + "/staging" }
    var databasePath: String { stateDirectory + "/state.db" }
    var lockPath: String { stateDirectory + "/lock" }
    var runningLockPath: String { stateDirectory + "/running.lock" }
    var buildsDirectory: String { root + "/builds" }
    var trashDirectory: String { stateDirectory + "/trash" }
    /// Delta packs being downloaded or applied; removed once the build is staged.
    var deltasDirectory: String { stateDirectory + "/deltas" }
    var currentLink: String { root + "/current" }

    func buildDirectory(_ id: String) -> String { buildsDirectory + "/" + id }
    func stagedDirectory(_ id: String) -> String { stagingDirectory + "/" + id }
    func manifestPath(_ id: String) -> String { manifestsDirectory + "/" + id + ".json.gz" }

    /// Makes `root` an install that follows `config`, trusting the root metadata at `trustedRoot`.
    public static func create(at root: String, config: InstallConfig,
                              trustedRoot: String) throws(PatchSyncError) -> Install {
        let install = Install(root: absolute(root))
        guard !FileSystem.exists(install.configPath) else {
            throw PatchSyncError(.usage, "\(install.root) is already an install",
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
        do {
            for dir in [install.metadataDirectory, install.manifestsDirectory, install.stagingDirectory,
                        install.buildsDirectory] { try FileSystem.makeDirectory(dir) }
            try FileSystem.writeAtomically(rootData, to: install.metadataDirectory + "/root.json")
        } catch { throw PatchSyncError.wrap(error).during("creating install \(install.root)") }
        try install.saveConfig(config)
        _ = try StateStore(path: install.databasePath)
        return install
    }

    /// Opens an existing install.
    public static func open(at root: String) throws(PatchSyncError) -> Install {
        let install = Install(root: absolute(root))
        guard FileSystem.exists(install.configPath) else {
            throw PatchSyncError(.usage, "\(install.root) is not a PatchSync install",
                                 remedy: "create one with `patchsync init --install \(install.root) --remote URL --root ROOT_JSON`")
        }
        return install
    }

    public func config() throws(PatchSyncError) -> InstallConfig {
        let data = try FileSystem.read(configPath, limit: 1 << 20)
        do { return try JSONDecoder().decode(InstallConfig.self, from: data) } catch {
            throw PatchSyncError(.usage, "\(configPath) is not a valid install configuration", cause: error)
        }
    }

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
        let temp = root + "/.current.tmp-\(getpid())"
        do {
            try FileSystem.remove(temp)
            if symlink("builds/" + id, temp) != 0 { throw Errno(errno, "creating symlink", temp) }
            try FileSystem.rename(temp, currentLink)
            try FileSystem.syncDirectory(root)
        } catch { throw PatchSyncError.wrap(error).during("switching \(currentLink) to \(id)") }
    }

    /// Takes the install's exclusive lock (agent and launcher), or fails as deferred when another holds it.
    func lock(_ purpose: String) throws(PatchSyncError) -> InstallLock {
        try InstallLock(path: lockPath, purpose: purpose)
    }

    /// True while a game launched through PatchSync holds `running.lock`.
    public func gameIsRunning() -> Bool {
        guard FileSystem.exists(runningLockPath) else { return false }
        return (try? InstallLock(path: runningLockPath, purpose: "probe")) == nil
    }

    /// Holds `running.lock` (shared: several game instances may run) until the value is released;
    /// while it is held, apply and rollback refuse to swap the tree.
    public func holdRunningLock() throws(PatchSyncError) -> RunningLock {
        try RunningLock(path: runningLockPath)
    }

    private static func absolute(_ path: String) -> String {
        let url = URL(fileURLWithPath: path, relativeTo: URL(fileURLWithPath: FileManager.default.currentDirectoryPath))
        return url.standardizedFileURL.path
    }
}

/// A shared flock(2) on `running.lock`, held while the game runs. The descriptor is
/// inherited by the game's process, so the lock outlives a launcher that dies first.
public final class RunningLock: Sendable {
    private let file: FileDescriptor

    init(path: String) throws(PatchSyncError) {
        do { file = try FileDescriptor(path: path, flags: O_RDWR | O_CREAT, mode: 0o644) } catch {
            throw PatchSyncError.wrap(error)
        }
        guard flock(file.fd, LOCK_SH) == 0 else { throw PatchSyncError.wrap(Errno(errno, "locking", path)) }
        _ = fcntl(file.fd, F_SETFD, 0)  // clear FD_CLOEXEC: the game keeps the lock while it runs
    }
}

/// An flock(2) held on a lock file until the value is released.
final class InstallLock: Sendable {
    private let file: FileDescriptor

    init(path: String, purpose: String) throws(PatchSyncError) {
        do { file = try FileDescriptor(path: path, flags: O_RDWR | O_CREAT, mode: 0o644) } catch {
            throw PatchSyncError.wrap(error)
        }
        guard flock(file.fd, LOCK_EX | LOCK_NB) == 0 else {
            throw PatchSyncError(.deferred, "another PatchSync process holds \(path) (\(purpose) must wait)",
                                 remedy: "try again when it has finished")
        }
    }

    /// Unlocks explicitly: a child forked by another thread may still share the descriptor until it
    /// execs, and closing ours alone would leave the lock held until then.
    deinit { flock(file.fd, LOCK_UN) }
}
