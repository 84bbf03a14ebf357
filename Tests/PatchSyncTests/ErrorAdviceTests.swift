import Foundation
import Testing

@testable import PatchSync

@Suite("Errors a player reads")
struct ErrorAdviceTests {
    @Test(
        "every reason and every code has advice for a person: no command line, no option, no path; a full disk names what to free"
    )
    func adviceForPeople() {
        var errors = PatchSyncError.Reason.allCases.map {
            PatchSyncError(.deferred, "/tmp/x: it failed", remedy: "run `patchsync sync --install /tmp/x`", reason: $0)
        }
        errors += PatchSyncError.Code.allCases.map { PatchSyncError($0, "it failed", remedy: "run `patchsync sync`") }
        for error in errors {
            let advice = error.advice
            #expect(!advice.isEmpty)
            #expect(
                !advice.contains("patchsync") && !advice.contains("--") && !advice.contains("`"),
                "\(error.reason.map(\.rawValue) ?? error.code.rawValue): \(advice)")
            if error.reason != nil { #expect(!advice.contains("/tmp/x"), "\(advice)") }
        }
        var full = PatchSyncError.diskFull("no space", required: 300 << 20, available: 100 << 20)
        #expect(full.advice.contains("200.0 MiB"), "\(full.advice)")
        full.reason = .diskFull
        #expect(full.requiredBytes == 300 << 20 && full.availableBytes == 100 << 20)
    }
}
