import Foundation
import Logging

/// What an apply did.
public struct ApplyReport: Codable, Sendable {
    /// False when no build was ready: nothing changed.
    public var applied: Bool
    /// The build ids (never the install's folder names) of the live build and the one before it.
    public var current: String?
    public var previous: String?
    /// How long the swap took inside the process, in milliseconds.
    public var milliseconds: Double?
}

extension Install {
    private static let logger = Logger(label: "patchsync.install")

    /// Swaps a ready build in: moves it into `builds/`, flips `current` with one rename, and
    /// records it; the old build is kept as previous. Refused while the game runs. A crash at any
    /// instant leaves `current` on a complete build. Builds retired by earlier applies are deleted
    /// afterwards (the swap's time does not include that).
    public func applyPendingUpdate() throws(PatchSyncError) -> ApplyReport {
        let lock = try lock(.live, for: "apply")
        defer { withExtendedLifetime(lock) {} }
        let state = try state()
        let (report, waiting) = try swap(state)
        if let waiting { throw waiting }
        // The swap is done and recorded: a clean-up that fails says so, and the next run does it.
        do throws(PatchSyncError) { try Housekeeping(install: self, state: state).run() } catch {
            Self.logger.warning("clean-up after the apply failed (the next sync or apply does it): \(error)")
        }
        return report
    }

    /// Applies under the live tree's lock, without the clean-up (the launcher does it while the game runs);
    /// a locked preload is no error here: the launcher starts the current build.
    func applyForLaunch() throws(PatchSyncError) -> ApplyReport {
        let lock = try lock(.live, for: "apply")
        defer { withExtendedLifetime(lock) {} }
        return try swap(try state()).report
    }

    /// Gathers the decision's inputs (the records brought in line with the link, the ready tree's seal,
    /// `running.lock` taken exclusively when something is to be swapped in: held across the swap, so a
    /// game cannot start between the check and the flip), then does what ``LiveDecision/apply`` says,
    /// timed. Returns why nothing was swapped in when the player waits for a locked preload.
    private func swap(_ state: StateStore) throws(PatchSyncError) -> (report: ApplyReport, waiting: PatchSyncError?) {
        try reconcile(state)
        let recorded = try state.read()
        let intact = recorded.ready.map(readyTreeIsIntact) ?? true
        let running = recorded.ready != nil && intact ? try RunningLock.exclusive(path: runningLockPath) : nil
        defer { withExtendedLifetime(running) {} }
        switch LiveDecision.apply(recorded, readyIntact: intact, gameRunning: running == nil, now: Date()) {
        case .nothing(let waiting):
            return (
                ApplyReport(
                    applied: false, current: buildId(of: currentDeployment(), recorded),
                    previous: buildId(of: previousDeployment(recorded), recorded)), waiting
            )
        case .refuse(let error, let dropReady):
            if dropReady, let ready = recorded.ready { try state.update { $0.dropReady(ready) } }
            throw error.during(dropReady ? "applying (in \(stagingDirectory))" : "applying")
        case .swap(let ready):
            let start = ContinuousClock.now
            var report = try apply(ready, state: state)
            let elapsed = ContinuousClock.now - start
            report.milliseconds = elapsed.inSeconds * 1000
            return (report, nil)
        }
    }

    /// The build id a deployment holds (its folder name may carry a suffix: `1.2@2`).
    func buildId(of deployment: String?, _ state: InstallState) -> String? {
        guard let deployment else { return nil }
        if let recorded = state.deployed[deployment] { return recorded.buildId }
        if let ready = state.ready, ready.name == deployment { return ready.buildId }
        return deployment
    }

    /// Moves `ready` into builds/, flips `current` to it and records it; retires the builds no longer kept.
    private func apply(_ ready: DeploymentIdentity, state: StateStore) throws(PatchSyncError) -> ApplyReport {
        try PatchSyncError.step("applying \(ready.name)") { () throws(PatchSyncError) in
            try moveIntoBuilds(ready, state: state)
            CrashPoint.applyMoved.reached()
            try flipCurrent(to: ready.name)
        }
        CrashPoint.applyFlipped.reached()
        let after = try state.update(.applyRecorded) { (s) -> InstallState in
            s.applied(ready)
            return s
        }
        // Other deployments of the same manifest left the history (``InstallState/applied(_:)``): their
        // folders go now, so removing a bundle frees its space at this apply.
        try retireOldBuilds(keeping: after.kept(buildsKept: try config().buildsKept))
        recordLiveBundles()
        return ApplyReport(
            applied: true, current: ready.buildId, previous: buildId(of: previousDeployment(after), after))
    }

    /// Whether the ready tree is still the tree that was verified: its folders' seal matches (or an apply
    /// moved it into builds/ before a crash).
    func readyTreeIsIntact(_ ready: DeploymentIdentity) -> Bool {
        let staged = stagedDirectory(ready.name)
        // moved before a crash
        if !FileSystem.exists(staged) && FileSystem.isDirectory(buildDirectory(ready.name)) { return true }
        return FileSystem.exists(staged) && ready.seal != nil && ready.seal == TreeSeal.of(staged)
    }

    /// Drops the ready record when its tree was changed or removed by hand since it was verified, so that
    /// no record names content that is not there and a sync stages it anew.
    func dropTamperedReady(_ state: StateStore) throws(PatchSyncError) {
        guard let ready = try state.read().ready, !readyTreeIsIntact(ready) else { return }
        try state.update { $0.dropReady(ready) }
    }

    /// Moves the ready tree (its seal checked) from staging/ into builds/.
    private func moveIntoBuilds(_ ready: DeploymentIdentity, state: StateStore) throws(PatchSyncError) {
        let staged = stagedDirectory(ready.name), final = buildDirectory(ready.name)
        if !FileSystem.exists(staged) && FileSystem.isDirectory(final) { return }  // moved before a crash
        do {
            try FileSystem.removeTree(final)
            try FileSystem.syncDirectory(staged)  // its files were synced when staged
            try FileSystem.rename(staged, final)
            try FileSystem.syncDirectory(buildsDirectory)
            try FileSystem.syncDirectory(stagingDirectory)
        } catch { throw PatchSyncError.wrap(error) }
    }

    /// Makes the previous build current again, atomically: one step back. Refused while the
    /// game runs, and when no earlier build is kept. Sync then holds back the build rolled
    /// back from until a newer one is published.
    public func rollback() throws(PatchSyncError) -> ApplyReport {
        let lock = try lock(.live, for: "rollback")
        defer { withExtendedLifetime(lock) {} }
        let state = try state()
        try reconcile(state)
        try dropTamperedReady(state)
        let recorded = try state.read()
        guard let current = currentDeployment() else {
            throw PatchSyncError(
                .usage, "\(root) has no build installed", remedy: "run `patchsync sync` and `patchsync apply`")
        }
        guard let previous = previousDeployment(recorded) else {
            throw PatchSyncError(
                .usage, "no build before \(current) is kept in \(buildsDirectory); rollback goes one step back",
                remedy: "raise keepBuilds in \(configPath) to keep more builds for rollback")
        }
        try checkComplete(previous, state: state)
        guard let running = try RunningLock.exclusive(path: runningLockPath) else {
            throw PatchSyncError(
                .deferred, "the game is running; rollback must wait", remedy: "try again when it has exited",
                reason: .gameRunning)
        }
        defer { withExtendedLifetime(running) {} }
        try PatchSyncError.step("rolling back to \(previous)") { () throws(PatchSyncError) in
            try flipCurrent(to: previous)
        }
        CrashPoint.rollbackFlipped.reached()
        let after = try state.update { (s) -> InstallState in
            s.rolledBack(to: previous)
            return s
        }
        recordLiveBundles()
        return ApplyReport(
            applied: true, current: buildId(of: previous, after),
            previous: buildId(of: previousDeployment(after), after))
    }

    /// Refuses (74, nothing changed) to make a kept build current when a file it was staged with is missing,
    /// not a regular file or of another size: a build folder damaged by hand is never swapped in.
    private func checkComplete(_ deployment: String, state: StateStore) throws(PatchSyncError) {
        guard let file = try firstDamagedFile(of: deployment, state: state) else { return }
        throw PatchSyncError(
            .localIO,
            "\(deployment) in \(buildsDirectory) was changed since it was installed (\(file) is missing or "
                + "changed); it is not made current",
            remedy: "nothing was changed: the current build stays live; a build published later updates it")
    }

    /// The first file `deployment` was staged with that is missing from its folder in builds/, not a regular
    /// file, or (with `sizes`) of another size; nil when each is there. One stat per file; bytes changed in
    /// place are `verify --full`'s to find once it is live.
    func firstDamagedFile(of deployment: String, state: StateStore, sizes: Bool = true) throws(PatchSyncError)
        -> String?
    {
        let folder = buildDirectory(deployment)
        for (file, _) in try state.buildFiles(build: try state.read().recordsKey(of: deployment)) {
            var st = stat()
            guard lstat(folder + "/" + file.path, &st) == 0, (st.st_mode & S_IFMT) == S_IFREG,
                !sizes || Int64(st.st_size) == file.size
            else { return file.path }
        }
        return nil
    }

    /// Moves builds beyond the kept ones out of builds/ with one rename each (cheap at launch);
    /// housekeeping deletes them. The caller holds `running.lock` exclusively: no game runs in any of them.
    private func retireOldBuilds(keeping keep: Set<String>) throws(PatchSyncError) {
        do {
            let old = try FileSystem.list(buildsDirectory).filter { !keep.contains($0) }
            guard !old.isEmpty else { return }
            try FileSystem.makeDirectory(trashDirectory)
            for name in old {
                try FileSystem.rename(
                    buildDirectory(name), layout.trashed(name, tag: UInt32.random(in: 0...UInt32.max)))
            }
            try FileSystem.syncDirectory(buildsDirectory)
        } catch { throw PatchSyncError.wrap(error).during("retiring old builds") }
        CrashPoint.retired.reached()
    }
}

/// A fingerprint of a tree's folders (path, inode, modification and change time): removing, adding or
/// replacing a file changes its folder's, so a staged tree emptied or changed by hand after it
/// was verified is noticed at apply, at the cost of one stat per folder (and readdir, whose d_type
/// tells folders from files). Apply checks it before the timed swap and before it takes
/// `running.lock`. A ready file's bytes rewritten in place (it is read-only) leave its folder
/// as it was: `verify --full` finds that after the apply.
enum TreeSeal {
    static func of(_ root: String) -> String? {
        var entries: [String] = []
        func walk(_ relative: String) -> Bool {
            let full = relative.isEmpty ? root : root + "/" + relative
            guard let st = try? FileSystem.status(full), (st.st_mode & S_IFMT) == S_IFDIR,
                let names = try? FileSystem.subdirectories(full)
            else { return false }
            entries.append(
                "\(relative)\t\(st.st_ino)\t\(st.st_mtim.tv_sec).\(st.st_mtim.tv_nsec)\t\(st.st_ctim.tv_sec).\(st.st_ctim.tv_nsec)"
            )
            for name in names {
                guard walk(relative.isEmpty ? name : relative + "/" + name) else { return false }
            }
            return true
        }
        guard walk("") else { return nil }
        return SHA256Hasher.hash(Data(entries.joined(separator: "\n").utf8)).hex
    }
}
