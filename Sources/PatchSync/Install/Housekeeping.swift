import Foundation

/// Crash cleanup and collection as its own idempotent pass, so that nothing in an install grows
/// without bound: builds retired to `trash/` are deleted, staging folders that are neither being
/// staged nor ready go, `.patchsync/manifests/` keeps only the manifests of the current, previous,
/// staging and ready deployments, `*.tmp-*` leftovers of a crash are removed, delta packs that the
/// staged build does not use are dropped, and the stat cache forgets deployments no longer kept.
///
/// It needs the live tree's lock (it must not race an apply that moves a staged folder); a sync
/// runs it when that lock is free and skips it otherwise (the next run does it), apply and launch
/// run it after the swap.
struct Housekeeping: Sendable {
    let install: Install
    let state: StateStore

    /// Takes the live tree's lock without waiting and runs the pass; returns false when another
    /// process holds the lock (nothing was done).
    @discardableResult
    func runIfFree(keepPacks: Set<String>? = nil) throws(PatchSyncError) -> Bool {
        guard let lock = try? install.lock(.live, for: "housekeeping") else { return false }
        defer { withExtendedLifetime(lock) {} }
        try run(keepPacks: keepPacks)
        return true
    }

    /// The pass, for a caller that holds the live tree's lock. `keepPacks`: the delta packs (by
    /// object hash) the staged build uses; nil keeps them all while a build is being staged, and
    /// removes the packs' folder when none is.
    func run(keepPacks: Set<String>? = nil) throws(PatchSyncError) {
        let s = try state.read()
        do {
            let staged = Set([s.staging?.name, s.ready?.name].compactMap { $0 })
            for name in try Self.list(install.stagingDirectory) where !staged.contains(name) {
                try FileSystem.removeTree(install.stagedDirectory(name))
            }
            for name in try Self.list(install.trashDirectory) {
                try FileSystem.removeTree(install.trashDirectory + "/" + name)
            }
            let manifests = Set([s.current, s.previous, s.staging?.name, s.ready?.name].compactMap { $0 }.map { $0 + ".json.gz" })
            for name in try Self.list(install.manifestsDirectory) where !manifests.contains(name) {
                try FileSystem.remove(install.manifestsDirectory + "/" + name)
            }
            for folder in [install.root, install.stateDirectory, install.metadataDirectory] {
                for name in try Self.list(folder) where Self.isLeftover(name) {
                    try FileSystem.removeTree(folder + "/" + name)
                }
            }
            if s.staging == nil && keepPacks == nil {
                try FileSystem.removeTree(install.deltasDirectory)
            } else if let keepPacks {
                for name in try Self.list(install.deltasDirectory) where !keepPacks.contains(name) {
                    try FileSystem.remove(install.deltasDirectory + "/" + name)
                }
            }
        } catch { throw PatchSyncError.wrap(error).during("cleaning up \(install.stateDirectory)") }
        let present = (try? FileSystem.list(install.buildsDirectory)) ?? []
        try state.forgetBuilds(except: Set(present + [s.ready?.name].compactMap { $0 }))
    }

    /// A temporary file (`NAME.tmp-PID`) whose writer no longer runs.
    static func isLeftover(_ name: String) -> Bool {
        guard let range = name.range(of: ".tmp-", options: .backwards), let pid = Int32(name[range.upperBound...]) else {
            return false
        }
        return kill(pid, 0) != 0 && errno == ESRCH
    }

    /// The names in a folder; none when it does not exist.
    private static func list(_ path: String) throws(Errno) -> [String] {
        guard FileSystem.isDirectory(path) else { return [] }
        return try FileSystem.list(path)
    }
}
