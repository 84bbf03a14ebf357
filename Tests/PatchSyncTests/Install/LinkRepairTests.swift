import Foundation
import PatchSyncTestSupport
import Testing

@testable import PatchSync

/// How the records and the `current` link come back in line (``InstallState/reconcile(link:linkComplete:present:)``),
/// driven by a table: build 1 then 2 applied, build 3 ready, and the link and folders as a kill or a hand left them.
@Suite("current and the records back in line", .tags(.small))
struct LinkRepairTests {
    struct Case: CustomTestStringConvertible, Sendable {
        var name: String
        /// The deployment `current` names (nil: removed), whether its folder is complete, and the folders gone.
        var link: String?
        var linkComplete = true
        var gone: Set<String> = []
        var repair: InstallState.LinkRepair
        var current: String?
        var previous: String?
        var ready: String?
        var testDescription: String { name }
    }

    static let cases: [Case] = [
        Case(
            name: "the link and the records agree: nothing changes", link: "2", repair: .inLine, current: "2",
            previous: "1", ready: "3"),
        Case(
            name: "an apply killed after its flip is finished: the ready build is current, the one before previous",
            link: "3", repair: .recorded, current: "3", previous: "2", ready: nil),
        Case(
            name:
                "an apply killed after its flip onto a build damaged since is undone: back to the recorded build, which is no longer ready",
            link: "3", linkComplete: false, repair: .flip(to: "2"), current: "2", previous: "1", ready: nil),
        Case(
            name: "a rollback killed after its flip is finished", link: "1", repair: .recorded, current: "1",
            previous: nil, ready: "3"),
        Case(
            name: "a removed link is put back on the recorded build", link: nil, repair: .flip(to: "2"), current: "2",
            previous: "1", ready: "3"),
        Case(
            name: "a link on a folder no record names flips back to the recorded build", link: "9",
            repair: .flip(to: "2"), current: "2",
            previous: "1", ready: "3"),
        Case(
            name: "a deleted live folder: nothing is current, and the link on it goes", link: "2", linkComplete: false,
            gone: ["2"],
            repair: .unlink, current: nil, previous: "1", ready: "3"),
        Case(
            name: "a deleted live folder whose link was removed too: nothing is current", link: nil, gone: ["2"],
            repair: .recorded,
            current: nil, previous: "1", ready: "3")
    ]

    /// Build 1 then 2 applied, build 3 ready.
    static func state() -> InstallState {
        var state = LiveDecisionTests.installed(
            LiveDecisionTests.build("2", 2), previous: LiveDecisionTests.build("1", 1))
        state.beginStaging(LiveDecisionTests.identity(LiveDecisionTests.build("3", 3)), sequence: 3)
        _ = state.finishStaging("3", seal: "seal")
        return state
    }

    @Test(
        "a kill between a flip and its record, a removed link, a deleted live folder: the records and the link come back in line, and a second pass finds nothing to do",
        arguments: cases)
    func reconcile(_ test: Case) {
        var state = Self.state()
        let repair = state.reconcile(link: test.link, linkComplete: test.linkComplete) { !test.gone.contains($0) }
        #expect(repair == test.repair)
        #expect(state.current == test.current)
        #expect(state.previous == test.previous)
        #expect(state.ready?.name == test.ready)
        var again = state
        let next = again.reconcile(link: Self.link(after: repair, test.link), linkComplete: true) {
            !test.gone.contains($0)
        }
        #expect(next == .inLine && again == state, "a second pass finds nothing to do")
    }

    @Test(
        "a complete link on a folder no record names, with nothing recorded current (a state database lost or reset), is adopted as the live build, never removed; an incomplete one goes"
    )
    func unknownLinkOnAFreshInstall() {
        var state = InstallState()
        let repair = state.reconcile(link: "9", linkComplete: true) { _ in true }
        #expect(repair == .recorded)
        #expect(state.current == "9" && state.history == ["9"])
        var broken = InstallState()
        #expect(broken.reconcile(link: "9", linkComplete: false) { _ in true } == .unlink)
        #expect(broken.current == nil)
    }

    @Test(
        "the name of a live build whose folder was deleted is never given to other content: the copy staged again gets a new one"
    )
    func deletedLiveNameStaysTaken() {
        var state = Self.state()
        _ = state.reconcile(link: nil, linkComplete: false) { $0 != "2" }
        #expect(state.current == nil)
        let name = state.newDeploymentName(for: "2") { _ in false }
        #expect(name != "2")
    }

    /// Where `current` points once the repair is done.
    static func link(after repair: InstallState.LinkRepair, _ link: String?) -> String? {
        switch repair {
        case .inLine, .recorded: return link
        case .flip(let deployment): return deployment
        case .unlink: return nil
        }
    }
}
