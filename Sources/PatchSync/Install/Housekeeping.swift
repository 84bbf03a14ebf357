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
///
/// Every deletion under `.patchsync/` is done here, each by a method named for what it deletes (the
/// pass, ``removePreloadStore()``, ``forgetTrustedMetadata(_:in:)``); the names are ``InstallLayout``'s.
struct Housekeeping: Sendable {
    let install: Install
    let state: StateStore
    /// The caller holds the staging lock (a sync): the pass does not take it.
    var stagingHeld = false

    private var layout: InstallLayout { install.layout }

    /// Takes the live tree's lock without waiting and runs the pass; returns false when another
    /// process holds the lock (nothing was done).
    /// Trash is emptied after the lock is given back: deleting a large retired build never keeps a
    /// launcher's apply waiting (a build is in trash/ only once no game uses it, and only to be deleted).
    @discardableResult
    func runIfFree(keepPacks: Set<String>? = nil) throws(PatchSyncError) -> Bool {
        do {
            guard let lock = try? install.lock(.live, for: "housekeeping") else { return false }
            defer { withExtendedLifetime(lock) {} }
            try run(keepPacks: keepPacks, emptyingTrash: false)
        }
        do { try emptyTrash() } catch { throw PatchSyncError.wrap(error).during("cleaning up \(layout.trashFolder)") }
        return true
    }

    /// The pass, for a caller that holds the live tree's lock. `keepPacks`: the delta packs (by
    /// object hash) the staged build uses; nil keeps them all while a build is being staged, and
    /// removes the packs' folder when none is.
    func run(keepPacks: Set<String>? = nil, emptyingTrash: Bool = true) throws(PatchSyncError) {
        do {
            let staging = stagingHeld ? nil : try? install.lock(.staging, for: "housekeeping")
            if stagingHeld || staging != nil {
                try collectStaged(keepPacks: keepPacks)
            }
            withExtendedLifetime(staging) {}
            // Slow on a large retired build, so after the staging lock is given back.
            if emptyingTrash { try emptyTrash() }
            try removeLeftovers()
        } catch let error as PatchSyncError {
            throw error
        } catch { throw PatchSyncError.wrap(error).during("cleaning up \(layout.stateFolder)") }
    }

    /// Deletes the builds that applies retired to `trash/`.
    private func emptyTrash() throws(Errno) {
        for name in try Self.list(layout.trashFolder) {
            let path = layout.trashFolder + "/" + name
            // Another process may be deleting the same folder: what is gone is no failure.
            do { try FileSystem.removeTree(path) } catch  where FileSystem.exists(path) { throw error } catch {}
        }
    }

    /// Deletes the temporary files of writers that no longer run: in the install folder, `.patchsync/`
    /// and the trusted metadata.
    private func removeLeftovers() throws(Errno) {
        for folder in [layout.root, layout.stateFolder, layout.metadataFolder] {
            for name in try Self.list(folder) where Self.isLeftover(name) {
                try FileSystem.removeTree(folder + "/" + name)
            }
        }
    }

    /// Deletes the preload store (`preload/`) whole: the preload it held is no longer offered. The caller
    /// holds the staging lock (a sync).
    func removePreloadStore() throws(Errno) {
        try FileSystem.removeTree(layout.preloadFolder)
    }

    /// Deletes files `names` of the preload store at `directory` (ranges that failed authentication, or
    /// that no preload and no staged build needs any more); one that is not there, or cannot be removed, is
    /// left for the next pass.
    static func removePreloadFiles(_ names: [String], in directory: String) {
        for name in names { try? FileSystem.remove(directory + "/" + name) }
    }

    /// Staging folders, manifests and delta packs no record needs, and the stat cache of builds
    /// that are gone; the caller holds both locks.
    private func collectStaged(keepPacks: Set<String>?) throws {
        let s = try state.read()
        let staged = Set([s.staging?.name, s.ready?.name].compactMap { $0 })
        for name in try Self.list(layout.stagingFolder) where !staged.contains(name) {
            try FileSystem.removeTree(layout.staged(name))
        }
        // A recycled build's moved files serve only the staging they were moved out of, while it runs.
        for name in try Self.list(layout.recycledFolder) where name != s.staging?.name {
            try FileSystem.removeTree(layout.recycledFolder + "/" + name)
        }
        let kept = s.kept(buildsKept: (try? install.config().buildsKept) ?? Int.max)
        let manifests = Set(kept.flatMap { InstallLayout.manifestNames(of: $0) })
        for name in try Self.list(layout.manifestsFolder) where !manifests.contains(name) && !Self.isTemporary(name) {
            try FileSystem.remove(layout.manifestsFolder + "/" + name)
        }
        if s.staging == nil && keepPacks == nil {
            try FileSystem.removeTree(layout.deltasFolder)
        } else if let keepPacks {
            for name in try Self.list(layout.deltasFolder) where !keepPacks.contains(name) && !Self.isTemporary(name) {
                try FileSystem.remove(layout.deltasFolder + "/" + name)
            }
        }
        let present = (try? FileSystem.list(layout.buildsFolder)) ?? []
        // The records of the builds present, ready and being staged (in a recycled folder: that build's
        // records, which say which of its files are untouched).
        let records = present.map { s.recordsKey(of: $0) } + [s.ready, s.staging].compactMap { $0?.recordsKey }
        try state.forgetBuilds(except: Set(records + [s.recycling].compactMap { $0 }))
    }

    /// A temporary file (`NAME.tmp-PID`) of any writer: removed only as a leftover (its writer dead).
    static func isTemporary(_ name: String) -> Bool { InstallLayout.isTemporary(name) }

    /// A temporary file (`NAME.tmp-PID`) whose writer no longer runs.
    static func isLeftover(_ name: String) -> Bool {
        guard let pid = InstallLayout.temporaryWriter(of: name) else { return false }
        return !ProcessIdentity.exists(pid)
    }

    /// The names in a folder; none when it does not exist.
    /// The names in the folder at `path`; none when it is missing or not a real folder (a link planted in
    /// its place is never followed: what it points at is not the install's to delete).
    private static func list(_ path: String) throws(Errno) -> [String] {
        guard let st = try FileSystem.status(path), (st.st_mode & S_IFMT) == S_IFDIR else { return [] }
        return try FileSystem.list(path)
    }
}
