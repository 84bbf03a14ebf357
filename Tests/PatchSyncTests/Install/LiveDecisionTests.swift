import Foundation
import PatchSyncTestSupport
import Testing

@testable import PatchSync

/// The one decision of what goes live, driven by tables: states built through InstallState's named
/// transitions, channel builds as signed metadata lists them, and an injected clock.
@Suite("What goes live: one pure decision", .tags(.small))
struct LiveDecisionTests {
    static func build(_ id: String, _ sequence: Int, preload: Bool = false, released: Bool = false) -> ChannelBuild {
        ChannelBuild(
            buildId: id, channel: "live", sequence: sequence,
            manifest: String(repeating: id.first.map(String.init) ?? "0", count: 64),
            preload: preload, released: released)
    }

    static func identity(_ build: ChannelBuild, name: String? = nil, bundles: [String]? = nil) -> DeploymentIdentity {
        var identity = DeploymentIdentity(
            name: name ?? build.buildId, buildId: build.buildId, channel: build.channel, manifest: build.manifest)
        identity.bundles = bundles
        return identity
    }

    /// An install with `live` applied (and `previous` before it), after the channel showed `seen`.
    static func installed(_ live: ChannelBuild?, previous: ChannelBuild? = nil, seen: Int = 0) -> InstallState {
        var state = InstallState()
        for build in [previous, live].compactMap({ $0 }) {
            state.beginStaging(identity(build), sequence: max(build.sequence, seen))
            _ = state.finishStaging(build.buildId, seal: "seal")
            state.applied(identity(build))
        }
        return state
    }

    struct ChooseCase: CustomTestStringConvertible, Sendable {
        var name: String
        var channel: [ChannelBuild]
        var seen: Int
        var stage: String?
        var preload: String?
        var refused = false
        var testDescription: String { name }
    }

    static let chooseCases: [ChooseCase] = [
        ChooseCase(
            name: "the newest build is staged", channel: [build("1", 1), build("2", 2)], seen: 1, stage: "2",
            preload: nil),
        ChooseCase(
            name: "a newest build older than one the channel showed is refused (rollback)",
            channel: [build("1", 1), build("2", 2)], seen: 3, stage: nil, preload: nil, refused: true),
        ChooseCase(
            name:
                "a locked preload never hides the live build: the build before it is staged, the preload fetched beside",
            channel: [build("1", 1), build("2", 2, preload: true)], seen: 1, stage: "1", preload: "2"),
        ChooseCase(
            name: "a released preload is staged like any build",
            channel: [build("1", 1), build("2", 2, preload: true, released: true)],
            seen: 1, stage: "2", preload: nil),
        ChooseCase(
            name: "rc1 released, rc2 locked: rc1 is staged and rc2 fetched beside it",
            channel: [build("1", 1), build("3", 2, preload: true, released: true), build("4", 3, preload: true)],
            seen: 2,
            stage: "3", preload: "4"),
        ChooseCase(
            name: "only locked preloads: nothing to stage yet, the newest is preloaded",
            channel: [build("2", 2, preload: true), build("3", 3, preload: true)], seen: 0, stage: nil, preload: "3"),
        ChooseCase(
            name:
                "a locked preload on top of an older build than one the channel showed: refused (rollback behind a preload)",
            channel: [build("1", 1), build("5", 5, preload: true)], seen: 3, stage: nil, preload: nil, refused: true),
        ChooseCase(name: "an empty channel: nothing", channel: [], seen: 0, stage: nil, preload: nil)
    ]

    @Test("which build a sync stages and which preload it fetches", arguments: chooseCases)
    func choose(_ c: ChooseCase) throws {
        var state = InstallState()
        state.beginStaging(Self.identity(Self.build("0", c.seen)), sequence: c.seen)
        state.abandonStaging()
        if c.refused {
            #expect(throws: PatchSyncError.self) { try LiveDecision.choose(c.channel, state: state) }
            return
        }
        let decided = try LiveDecision.choose(c.channel.shuffled(), state: state)
        #expect(decided.stage?.buildId == c.stage)
        #expect(decided.preload?.buildId == c.preload)
    }

    @Test("held back: the build a player rolled back from is not staged again until a newer one is published")
    func heldBack() {
        let one = Self.build("1", 1), two = Self.build("2", 2), three = Self.build("3", 3)
        var state = Self.installed(two, previous: one)
        state.rolledBack(to: "1")
        #expect(LiveDecision.isHeldBack(two, state: state))
        #expect(!LiveDecision.isHeldBack(three, state: state))
        var step = state
        #expect(
            LiveDecision.step(&step, build: two, bundles: ["base"], all: ["base"], later: [], inUse: { _ in false })
                .outcome == .heldBack)
        guard
            case .stage = LiveDecision.step(
                &step, build: three, bundles: ["base"], all: ["base"], later: [], inUse: { _ in false })
        else {
            Issue.record("a newer build is staged")
            return
        }
        #expect(step.heldBack == nil, "staging a newer build ends the hold")
    }

    @Test("a step is up to date, already ready, resumed under its name, or a new deployment under a name never used")
    func steps() {
        let one = Self.build("1", 1), two = Self.build("2", 2)
        var state = Self.installed(one)
        let all = ["base", "hd"]
        #expect(
            LiveDecision.step(&state, build: one, bundles: all, all: all, later: [], inUse: { _ in false }).outcome
                == .upToDate)
        guard
            case .stage(let first) = LiveDecision.step(
                &state, build: two, bundles: ["base"], all: all, later: [all],
                inUse: { _ in false })
        else {
            Issue.record("build 2's required part is staged")
            return
        }
        #expect(first.name == "2" && first.bundles == ["base"])
        guard
            case .stage(let resumed) = LiveDecision.step(
                &state, build: two, bundles: ["base"], all: all, later: [all],
                inUse: { _ in true })
        else {
            Issue.record("the same step resumes")
            return
        }
        #expect(resumed.name == "2", "a step that holds the same manifest and bundles resumes its deployment")
        _ = state.finishStaging("2", seal: "seal")
        #expect(
            LiveDecision.step(&state, build: two, bundles: ["base"], all: all, later: [all], inUse: { _ in true })
                .outcome == .alreadyReady)
        guard
            case .stage(let full) = LiveDecision.step(
                &state, build: two, bundles: all, all: all, later: [], inUse: { $0 == "2" })
        else {
            Issue.record("the full selection is staged next")
            return
        }
        #expect(full.name != "2" && full.name.hasPrefix("2@"), "a name on disk is never given to other content")
    }

    struct ApplyCase: CustomTestStringConvertible, Sendable {
        var name: String
        var ready: Bool
        var intact = true
        var game = false
        /// A locked preload's release time, in seconds from now (nil: none).
        var preloadReleaseIn: TimeInterval?
        var expected: Expected
        var testDescription: String { name }

        enum Expected: Sendable, Equatable {
            case swap, nothing
            case waiting(PatchSyncError.Code)
            case refused(PatchSyncError.Code, drop: Bool)
        }
    }

    static let applyCases: [ApplyCase] = [
        ApplyCase(name: "a ready build is swapped in", ready: true, expected: .swap),
        ApplyCase(name: "nothing ready: nothing to do", ready: false, expected: .nothing),
        ApplyCase(
            name: "a ready tree changed by hand is refused (74) and dropped", ready: true, intact: false,
            expected: .refused(.localIO, drop: true)),
        ApplyCase(
            name: "while the game runs the ready build stays ready (75)", ready: true, game: true,
            expected: .refused(.deferred, drop: false)),
        ApplyCase(
            name: "a locked preload before its release time: try later (75)", ready: false, preloadReleaseIn: 3600,
            expected: .waiting(.deferred)),
        ApplyCase(
            name: "a locked preload less than a day past its release time: the release runs late (75)", ready: false,
            preloadReleaseIn: -3600, expected: .waiting(.deferred)),
        ApplyCase(
            name: "a locked preload a day or more past its release time: this clock is ahead of signed metadata (65)",
            ready: false, preloadReleaseIn: -86400 - 60, expected: .waiting(.refusedData)),
        ApplyCase(
            name: "a ready build beats a locked preload", ready: true, preloadReleaseIn: -86400 * 3, expected: .swap)
    ]

    @Test("what an apply swaps in or refuses, with an injected clock", arguments: applyCases)
    func apply(_ c: ApplyCase) {
        let clock = ManualClock(ManualClock.utc(10))
        let one = Self.build("1", 1), two = Self.build("2", 2)
        var state = Self.installed(one)
        if c.ready {
            state.beginStaging(Self.identity(two), sequence: 2)
            _ = state.finishStaging("2", seal: "seal")
        }
        if let release = c.preloadReleaseIn {
            state.recordPreload(
                PreloadStatus(
                    buildId: "3", channel: "live", releaseAt: clock.now() + release, bytes: 10, bytesDone: 10,
                    released: false))
        }
        let decision = LiveDecision.apply(state, readyIntact: c.intact, gameRunning: c.game, now: clock.now())
        switch (decision, c.expected) {
        case (.swap(let ready), .swap): #expect(ready.buildId == "2")
        case (.nothing(nil), .nothing): break
        case (.nothing(let waiting?), .waiting(let code)): #expect(waiting.code == code, "\(waiting)")
        case (.refuse(let error, let drop), .refused(let code, let expectedDrop)):
            #expect(error.code == code && drop == expectedDrop, "\(error)")
        default: Issue.record("decided \(decision), expected \(c.expected)")
        }
    }
}
