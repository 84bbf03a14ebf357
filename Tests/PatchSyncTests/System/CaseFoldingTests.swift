import Foundation
import Testing

@testable import PatchSync

/// An install is refused where names fold case (`Data/a` and `data/a` one file): the casefold attribute
/// of ext4 and f2fs, and file systems that fold case throughout. (This machine's kernel mounts neither:
/// ext4's casefold needs CONFIG_UNICODE and vfat is not built, so the decision is tested on the values
/// the kernel reports, and the real call on a folder that does not fold case.)
@Suite("Case-folding folders")
struct CaseFoldingTests {
    @Test(
        "the casefold attribute and FAT, exFAT, HFS+ and SMB are refused with the reason; ext4 and tmpfs without it are not"
    )
    func decision() {
        #expect(CaseFolding.reason(fileSystemType: 0xEF53, inodeFlags: 0x0008_0000) == nil, "ext4 with extents only")
        #expect(CaseFolding.reason(fileSystemType: 0xEF53, inodeFlags: 0x4008_0000)?.contains("casefold") == true)
        #expect(CaseFolding.reason(fileSystemType: 0x0102_1994, inodeFlags: nil) == nil, "tmpfs keeps no flags")
        #expect(CaseFolding.reason(fileSystemType: 0x4d44, inodeFlags: nil)?.contains("FAT") == true)
        #expect(CaseFolding.reason(fileSystemType: 0x2011_BAB0, inodeFlags: nil)?.contains("exFAT") == true)
        #expect(CaseFolding.reason(fileSystemType: 0xFE53_4D42, inodeFlags: nil)?.contains("SMB") == true)
        #expect(
            CaseFolding.reason(fileSystemType: 0x7366_746e, inodeFlags: 0) == nil,
            "ntfs3 is case-sensitive unless mounted nocase (the probe)")
    }

    @Test(
        "a folder that does not fold case passes, through the real statfs and FS_IOC_GETFLAGS, and so does a path to be created under it"
    )
    func realFolder() throws {
        let folder = NSTemporaryDirectory() + "patchsync-case-\(UUID().uuidString)"
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: folder) }
        #expect(CaseFolding.reason(at: folder, probe: true) == nil)
        let left = try FileManager.default.contentsOfDirectory(atPath: folder)
        #expect(!CaseFolding.probeFolds(folder) && left.isEmpty, "the probe leaves nothing")
        try CaseFolding.refuse(install: folder + "/not/yet/made")
        try CaseFolding.refuse(install: folder, checking: folder)
    }

    @Test(
        "the probe finds a name under another case: what a case-blind folder shows, here a file of the lowercased name made first"
    )
    func probeSeesFolding() throws {
        let folder = NSTemporaryDirectory() + "patchsync-case-\(UUID().uuidString)"
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: folder) }
        FileManager.default.createFile(atPath: folder + "/patchsync-case-probe-\(getpid())", contents: Data())
        #expect(CaseFolding.probeFolds(folder))
        #expect(CaseFolding.reason(at: folder, probe: true)?.contains("another case") == true)
        #expect(throws: PatchSyncError.self) { try CaseFolding.refuse(install: folder, checking: folder) }
    }
}
