import ArgumentParser
import Foundation
import PatchSync

/// Options every client verb takes.
struct ClientOptions: ParsableArguments {
    @Option(help: "The install folder (default: the current directory).")
    var install: String = "."

    @Flag(help: "Print one JSON object (progress events one per line before it).")
    var json = false

    /// The install, opened as its owner: run as root on an install a player owns (a `sudo` by habit, a
    /// root cron job), the command first becomes that player, so every file it writes stays the
    /// player's and the next command run as the player never fails on a root-owned one.
    func openInstall() throws(PatchSyncError) -> Install {
        try actAsOwner(of: install)
        return try Install.open(at: install)
    }
}

/// Run as root, becomes the owner of `folder` (its user and group, no supplementary groups) for the rest
/// of the process; nothing changes when not root, or when root owns the folder.
func actAsOwner(of folder: String) throws(PatchSyncError) {
    guard geteuid() == 0 else { return }
    var st = stat()
    guard stat(folder, &st) == 0, st.st_uid != 0 else { return }
    guard setgroups(0, nil) == 0, setgid(st.st_gid) == 0, setuid(st.st_uid) == 0 else {
        throw PatchSyncError(
            .usage, "cannot act as the owner of \(folder) (uid \(st.st_uid)): nothing was written",
            remedy: "run the command as the player who owns the install")
    }
}
