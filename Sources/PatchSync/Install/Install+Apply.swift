import Foundation

/// What an apply did.
public struct ApplyReport: Codable, Sendable {
    /// False when no build was ready: nothing changed.
    public var applied: Bool
    public var current: String?
    public var previous: String?
    /// How long the swap took inside the process, in milliseconds.
    public var milliseconds: Double?
}

extension Install {
    /// Swaps a ready build in: moves it into `builds/`, flips `current` with one
    /// rename, and records it; the old build is kept as previous. Refused while
    /// the game runs. A crash at any instant leaves `current` on a complete build.
    public func applyPendingUpdate() throws(PatchSyncError) -> ApplyReport {
        let start = ContinuousClock.now
        var report = try apply()
        if report.applied {
            let elapsed = ContinuousClock.now - start
            report.milliseconds = Double(elapsed.components.seconds) * 1000 + Double(elapsed.components.attoseconds) / 1e15
        }
        return report
    }

    private func apply() throws(PatchSyncError) -> ApplyReport {
        let lock = try lock("apply")
        defer { withExtendedLifetime(lock) {} }
        let state = try state()
        try reconcile(state)
        guard let ready = try state.setting("ready") else {
            return ApplyReport(applied: false, current: currentDeployment(), previous: try previousDeployment(state))
        }
        guard !gameIsRunning() else {
            throw PatchSyncError(.deferred, "the game is running; build \(ready) stays ready",
                                 remedy: "apply when the game has exited (the launcher does it at the next start)")
        }
        try PatchSyncError.step("applying \(ready)") { () throws(PatchSyncError) in
            let staged = stagedDirectory(ready), final = buildDirectory(ready)
            do {
                if FileSystem.exists(staged) {
                    try FileSystem.removeTree(final)
                    try FileSystem.syncDirectory(staged)  // its files were synced when staged
                    try FileSystem.rename(staged, final)
                    try FileSystem.syncDirectory(buildsDirectory)
                    try FileSystem.syncDirectory(stagingDirectory)
                } else if !FileSystem.isDirectory(final) {
                    try state.set(["ready": nil])
                    throw PatchSyncError(.localIO, "the staged tree is gone", remedy: "run `patchsync sync` again")
                }
            } catch { throw PatchSyncError.wrap(error) }
            try flipCurrent(to: ready)
        }
        var history = try state.history().filter { $0 != ready }
        history.append(ready)
        try state.set(["current": ready, "ready": nil, "history": StateStore.encode(history: history)])
        try retireOldBuilds(keeping: Set(history.suffix(try config().buildsKept) + [ready]))
        return ApplyReport(applied: true, current: ready, previous: try previousDeployment(state))
    }

    /// Makes the previous build current again, atomically: one step back. Refused while the
    /// game runs, and when no earlier build is kept. Sync then holds back the build rolled
    /// back from until a newer one is published.
    public func rollback() throws(PatchSyncError) -> ApplyReport {
        let lock = try lock("rollback")
        defer { withExtendedLifetime(lock) {} }
        let state = try state()
        try reconcile(state)
        guard let current = currentDeployment() else {
            throw PatchSyncError(.usage, "\(root) has no build installed", remedy: "run `patchsync sync` and `patchsync apply`")
        }
        guard let previous = try previousDeployment(state) else {
            throw PatchSyncError(.usage, "no build before \(current) is kept in \(buildsDirectory); rollback goes one step back",
                                 remedy: "raise keepBuilds in \(configPath) to keep more builds for rollback")
        }
        guard !gameIsRunning() else {
            throw PatchSyncError(.deferred, "the game is running; rollback must wait", remedy: "try again when it has exited")
        }
        try PatchSyncError.step("rolling back to \(previous)") { () throws(PatchSyncError) in try flipCurrent(to: previous) }
        let history = try state.history().dropLast()
        let ready = try state.setting("ready")
        let heldBack = Deployment.buildID(of: current)
        try state.set(["current": previous, "history": StateStore.encode(history: Array(history)), "heldBack": heldBack,
                       "ready": ready.map(Deployment.buildID(of:)) == heldBack ? nil : ready])
        return ApplyReport(applied: true, current: previous, previous: try previousDeployment(state))
    }

    /// Moves builds beyond the kept ones out of builds/ with one rename each (cheap at launch);
    /// the next sync deletes them.
    private func retireOldBuilds(keeping keep: Set<String>) throws(PatchSyncError) {
        do {
            let old = try FileSystem.list(buildsDirectory).filter { !keep.contains($0) }
            guard !old.isEmpty else { return }
            try FileSystem.makeDirectory(trashDirectory)
            for name in old { try FileSystem.rename(buildDirectory(name), trashDirectory + "/\(name)-\(UInt32.random(in: 0...UInt32.max))") }
            try FileSystem.syncDirectory(buildsDirectory)
        } catch { throw PatchSyncError.wrap(error).during("retiring old builds") }
    }

    /// Brings the recorded state in line with the `current` symlink after a crash between
    /// a flip and its record: an apply (the link is new) or a rollback (the link went one back).
    func reconcile(_ state: StateStore) throws(PatchSyncError) {
        let link = currentDeployment(), recorded = try state.setting("current")
        guard let link, link != recorded else { return }
        var history = try state.history()
        var values: [String: String?] = ["current": link]
        if history.count >= 2, history[history.count - 2] == link {
            history.removeLast()
            if let recorded { values["heldBack"] = Deployment.buildID(of: recorded) }
        } else {
            history = history.filter { $0 != link } + [link]
        }
        values["history"] = StateStore.encode(history: history)
        if try state.setting("ready") == link { values["ready"] = .some(nil) }
        try state.set(values)
    }
}
