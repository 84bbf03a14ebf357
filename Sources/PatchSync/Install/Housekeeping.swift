import Foundation

/// Crash cleanup and collection as its own idempotent pass, so that nothing in an install grows
/// without bound: builds retired to `trash/` are deleted, staging folders that are neither being
/// staged nor ready go, `.patchsync/manifests/` keeps only the manifests of the deployments
/// ``InstallState/kept(buildsKept:)`` names, `*.tmp-*` leftovers of a crash are removed, delta packs that the
/// staged build does not use are dropped, and the stat cache forgets deployments no longer kept.
///
/// Emptying `trash/` never pulls a build from under a game: a build goes there only when an apply retires
/// it with `running.lock` held exclusively, and a launched game holds that lock shared, in the build
/// folder it was started in, until it exits (``GameLauncher``), so no game launched through PatchSync runs
/// from a folder in `trash/`.
///
/// It needs the live tree's lock (it must not race an apply that moves a staged folder); a sync
/// runs it when that lock is free and skips it otherwise (the next run does it), apply and launch
/// run it after the swap. What a sync works on (staging folders, manifests, delta packs, the stat
/// cache) is touched only with the staging lock too, taken without waiting and with the state read
/// after it; when a sync holds it, only `trash/` and dead writers' leftovers go.
struct Housekeeping: Sendable {
    let install: Install
    let state: StateStore
    /// The caller holds the staging lock (a sync): the pass does not take it.
    var stagingHeld = false

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
        do {
            let staging = stagingHeld ? nil : try? install.lock(.staging, for: "housekeeping")
            if stagingHeld || staging != nil {
                try collectStaged(keepPacks: keepPacks)
            }
            withExtendedLifetime(staging) {}
            // Slow on a large retired build, so after the staging lock is given back.
            for name in try Self.list(install.trashDirectory) {
                try FileSystem.removeTree(install.trashDirectory + "/" + name)
            }
            for folder in [install.root, install.stateDirectory, install.metadataDirectory] {
                for name in try Self.list(folder) where Self.isLeftover(name) {
                    try FileSystem.removeTree(folder + "/" + name)
                }
            }
        } catch let error as PatchSyncError {
            throw error
        } catch { throw PatchSyncError.wrap(error).during("cleaning up \(install.stateDirectory)") }
    }

    /// Staging folders, manifests and delta packs no record needs, and the stat cache of builds
    /// that are gone; the caller holds both locks.
    private func collectStaged(keepPacks: Set<String>?) throws {
        let s = try state.read()
        let staged = Set([s.staging?.name, s.ready?.name].compactMap { $0 })
        for name in try Self.list(install.stagingDirectory) where !staged.contains(name) {
            try FileSystem.removeTree(install.stagedDirectory(name))
        }
        let kept = s.kept(buildsKept: (try? install.config().buildsKept) ?? Int.max)
        let manifests = Set(kept.flatMap { [$0 + ".json.gz", $0 + ".bundles"] })
        for name in try Self.list(install.manifestsDirectory) where !manifests.contains(name) && !Self.isTemporary(name) {
            try FileSystem.remove(install.manifestsDirectory + "/" + name)
        }
        if s.staging == nil && keepPacks == nil {
            try FileSystem.removeTree(install.deltasDirectory)
        } else if let keepPacks {
            for name in try Self.list(install.deltasDirectory) where !keepPacks.contains(name) && !Self.isTemporary(name) {
                try FileSystem.remove(install.deltasDirectory + "/" + name)
            }
        }
        let present = (try? FileSystem.list(install.buildsDirectory)) ?? []
        try state.forgetBuilds(except: Set(present + [s.ready?.name].compactMap { $0 }))
    }

    /// A temporary file (`NAME.tmp-PID`) of any writer: removed only as a leftover (its writer dead).
    static func isTemporary(_ name: String) -> Bool { name.range(of: ".tmp-") != nil }

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
