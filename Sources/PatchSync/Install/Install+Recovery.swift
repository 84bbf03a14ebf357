import Foundation
import Logging

/// The recovery pass that opening an install runs, as OSTree cleans up at every start: it brings `current`
/// and the recorded live build in line when a kill or a hand left them apart. An apply or a rollback killed
/// between its flip and its record is finished (or undone, when the build it flipped to is no longer
/// complete); a removed `current` is put back; a live build whose folder was deleted is forgotten, so the
/// next sync fetches it again. Idempotent: a kill during the pass leaves work the next one does.
extension Install {
    private static let recoveryLogger = Logger(label: "patchsync.install")

    /// Runs ``reconcile(_:)`` when `current` and the records disagree, with the live tree's lock taken without
    /// waiting. When they agree it only reads the link and the state (read-only): nothing is locked, so a
    /// status beside an apply never makes that apply wait. Skipped while another process holds the lock (an
    /// apply or rollback records its own flip; the others reconcile first). A failure is logged: the
    /// command's own steps meet it again, and the next command tries again.
    func recover() {
        guard linkDisagrees() else { return }
        do throws(PatchSyncError) {
            guard let lock = try? lock(.live, for: "recovery") else { return }
            defer { withExtendedLifetime(lock) {} }
            try reconcile(try state())
        } catch {
            Self.recoveryLogger.warning("bringing \(currentLink) in line with the recorded live build failed: \(error)")
        }
    }

    /// Whether `current` names another deployment than the records, or the recorded one's folder is gone.
    /// False when the state cannot be read (the command that needs it says why).
    private func linkDisagrees() -> Bool {
        guard let recorded = try? state(readOnly: true).read() else { return false }
        guard let current = recorded.current else { return currentDeployment() != nil }
        return currentDeployment() != current || !FileSystem.isDirectory(buildDirectory(current))
    }

    /// Brings the records and `current` in line (``InstallState/reconcile(link:linkComplete:present:)``) and
    /// does what that leaves to the link. The caller holds the live tree's lock, so no flip happens meanwhile.
    /// A deployment the link names is complete when its folder holds every file it was staged with; that
    /// costs one stat per file, only when the link names another deployment than the records. A change of
    /// the live content waits while a game runs (the next command does it); something else than a link at
    /// `current` (a folder made by hand) is never touched.
    func reconcile(_ state: StateStore) throws(PatchSyncError) {
        let link = currentDeployment()
        guard link != nil || !FileSystem.exists(currentLink) else { return }
        var complete = false
        if let link, try state.read().current != link, FileSystem.isDirectory(buildDirectory(link)) {
            // The flip is an apply's commit point: a file changed in place since is damage to the live build,
            // verify's to find, as in any live build; a file gone means the folder is no longer that build.
            complete = try firstDamagedFile(of: link, state: state, sizes: false) == nil
        }
        let present = { (deployment: String) in FileSystem.isDirectory(buildDirectory(deployment)) }
        let repair = try state.update { (s) in s.reconcile(link: link, linkComplete: complete, present: present) }
        switch repair {
        case .inLine:
            return
        case .recorded:
            break
        case .flip(let deployment) where link == nil:  // put back: the live content stays what it was
            try flipCurrent(to: deployment)
        case .flip, .unlink:
            // The live content changes: never under a running game (the next command does it then).
            guard let running = try RunningLock.exclusive(path: runningLockPath) else { return }
            defer { withExtendedLifetime(running) {} }
            if case .flip(let deployment) = repair { try flipCurrent(to: deployment) } else { try removeCurrent() }
        }
        recordLiveBundles()
    }

    /// ``reconcile(_:)`` when the live tree's lock is free (a sync); else an apply or rollback is
    /// under way and records its own flip.
    func reconcileIfFree(_ state: StateStore) throws(PatchSyncError) {
        guard let lock = try? lock(.live, for: "sync") else { return }
        defer { withExtendedLifetime(lock) {} }
        try reconcile(state)
    }
}
