import Foundation

/// What an apply did.
public struct ApplyReport: Codable, Sendable {
    /// False when no build was ready: nothing changed.
    public var applied: Bool
    public var current: String?
    public var previous: String?
}

extension Install {
    /// Swaps a ready build in: moves it into `builds/`, flips `current` with one
    /// rename, and records it; the old build is kept as previous. Refused while
    /// the game runs. A crash at any instant leaves `current` on a complete build.
    public func applyPendingUpdate() throws(PatchSyncError) -> ApplyReport {
        let lock = try lock("apply")
        defer { withExtendedLifetime(lock) {} }
        let state = try state()
        try reconcile(state)
        let old = currentBuild()
        guard let ready = try state.setting("ready") else {
            return ApplyReport(applied: false, current: old, previous: try state.setting("previous"))
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
        try state.set(["current": ready, "previous": old, "ready": nil])
        return ApplyReport(applied: true, current: ready, previous: old)
    }

    /// Brings the recorded current build in line with the `current` symlink after a
    /// crash between the flip and the record.
    func reconcile(_ state: StateStore) throws(PatchSyncError) {
        let link = currentBuild(), recorded = try state.setting("current")
        guard let link, link != recorded else { return }
        let ready = try state.setting("ready")
        try state.set(["current": link, "previous": recorded, "ready": ready == link ? nil : ready])
    }
}
