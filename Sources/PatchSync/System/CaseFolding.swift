internal import CLinux
import Foundation

/// Whether a folder matches names without regard to case (ext4 or f2fs with the casefold attribute, or a
/// file system that folds case throughout). There `Data/a` and `data/a` are one file, and a build's
/// paths that differ only in case would overwrite each other or lead a link out of its folder: an install
/// is refused there, with what to do.
enum CaseFolding {
    /// FS_CASEFOLD_FL: the directory's names are matched without regard to case.
    static let casefoldFlag: UInt32 = 0x4000_0000
    /// statfs(2) magic numbers of file systems that fold case everywhere (or usually do): vfat/msdos,
    /// exFAT, HFS+, and SMB shares (CIFS, SMB2), which a Windows or macOS server serves case-blind.
    /// Others that may (ntfs3 mounted `nocase`, a virtual machine's shared folder) are found by the probe.
    static let foldingFileSystems: [Int: String] = [
        0x4d44: "FAT", 0x2011_BAB0: "exFAT", 0x482b: "HFS+", 0xFF53_4D42: "SMB", 0xFE53_4D42: "SMB"
    ]

    /// Why names under a folder of file system `type` with inode flags `flags` fold case (nil: they do not).
    static func reason(fileSystemType type: Int, inodeFlags flags: UInt32?) -> String? {
        if let name = foldingFileSystems[type] { return "it is on a \(name) file system, which ignores case in names" }
        if let flags, flags & casefoldFlag != 0 {
            return "it has the casefold attribute (chattr +F): names ignore case there"
        }
        return nil
    }

    /// Whether a name written in `folder` (the install's own) is found again under another case: a file
    /// made and removed at once. False when it cannot be made (nothing is concluded from that).
    static func probeFolds(_ folder: String) -> Bool {
        let name = "PatchSync-Case-Probe-\(getpid())"
        let path = folder + "/" + name
        let fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0o600)
        guard fd >= 0 else { return false }
        close(fd)
        defer { unlink(path) }
        var st = stat()
        return lstat(folder + "/" + name.lowercased(), &st) == 0
    }

    /// Why names under `path` (a folder that exists) fold case, or nil; `probe`: also try a name there
    /// (only in a folder of the install's own).
    static func reason(at path: String, probe: Bool = false) -> String? {
        if probe, probeFolds(path) { return "a file made there is found under another case of its name" }
        let type = clinux_fs_type(path)
        guard type != -1 else { return nil }
        let fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        defer { if fd >= 0 { close(fd) } }
        var flags: UInt32 = 0
        let read = fd >= 0 && clinux_inode_flags(fd, &flags) == 0
        return reason(fileSystemType: type, inodeFlags: read ? flags : nil)
    }

    /// Refuses an install at `root` where names fold case: checks `folder` (by default `root`), or the
    /// nearest folder above it that exists (a new folder inherits the casefold attribute from its parent).
    static func refuse(install root: String, checking given: String? = nil) throws(PatchSyncError) {
        var folder = given ?? root
        while !FileSystem.isDirectory(folder), folder != "/", !folder.isEmpty { folder = FileSystem.parent(of: folder) }
        // The probe writes only in the install's own folder, never in a folder above a new install.
        guard let why = reason(at: folder, probe: given != nil && folder == given) else { return }
        throw PatchSyncError(
            .localIO, "\(root) cannot hold an install: \(why)",
            remedy:
                "choose a folder on a case-sensitive file system (ext4, xfs, btrfs) without the casefold attribute; "
                + "nothing was changed")
    }
}
