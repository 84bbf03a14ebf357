import Foundation
import Synchronization

/// A build of the install's channel as signed targets metadata lists it, reduced to what the
/// decision of what goes live reads.
struct ChannelBuild: Sendable, Equatable {
    var buildId: String
    var channel: String
    var sequence: Int
    /// SHA-256 of its manifest target: names its content.
    var manifest: String
    /// Set when the publisher put this build back on its channel (`repo rollback`).
    var rollback: RollbackNote?
    /// A preload: sealed until signed metadata releases its key.
    var preload = false
    /// For a preload: whether signed metadata (the releases role) lists its key now.
    var released = false

    /// A preload whose key is not released: it never hides the build that is live now.
    var locked: Bool { preload && !released }
}

extension ChannelBuild {
    init(_ target: ManifestTarget, released: Bool) throws(PatchSyncError) {
        guard let sha = target.file.hashes["sha256"] else {
            throw PatchSyncError(.refusedData, "target \(target.path) has no sha256")
        }
        self.init(
            buildId: target.info.buildId, channel: target.info.channel, sequence: target.info.sequence, manifest: sha,
            rollback: target.info.rollback, preload: target.info.preload != nil, released: released)
    }
}

/// The one decision of what goes live, as pure functions of their inputs (the install's recorded
/// state, the channel's signed builds, the player's bundle choice, preloads, the clock): which build a
/// sync stages and which preload it fetches beside it, the deployment each step of the bundle
/// selection stages, and what an apply may swap in or must refuse. The rollback check, the held-back
/// rule, the preload choice, the bundle steps and apply's refusals live here and nowhere else; the
/// callers gather the inputs (signed metadata, locks, seals) and carry out what it returns.
enum LiveDecision {
    /// Which build a sync stages and which preload it fetches beside it. The channel's newest build
    /// (highest sequence) is refused when it is older than one the channel already showed (a rollback
    /// attack). A newest build that is a locked preload is fetched beside the newest build before it
    /// that is not locked (nil when there is none), which is staged, and refused in turn when older than
    /// one already staged; otherwise the newest is staged.
    static func choose(_ channel: [ChannelBuild], state: InstallState) throws(PatchSyncError)
        -> (stage: ChannelBuild?, preload: ChannelBuild?)
    {
        let ordered = channel.sorted { $0.sequence > $1.sequence }
        guard let newest = ordered.first else { return (nil, nil) }
        let seen = state.seenSequence[newest.channel] ?? 0
        let stage = newest.locked ? ordered.dropFirst().first { !$0.locked } : newest
        // One rule for what is chosen: the build staged (the newest, or the one under a locked preload), or the
        // preload when nothing is, is never older than a build this install already staged (a rollback attack).
        let checked = stage ?? newest
        guard checked.sequence >= seen else {
            throw PatchSyncError(
                .refusedData,
                "channel \(checked.channel) offers build \(checked.buildId) with sequence \(checked.sequence)"
                    + (checked == newest ? "" : " under preload \(newest.buildId)")
                    + ", lower than \(seen) already seen (rollback)",
                remedy: "the origin serves an old build; nothing was changed")
        }
        return (stage, newest.locked ? newest : nil)
    }

    /// The held-back rule: after a player's rollback, the build rolled back from is not staged again
    /// (unless the live deployment holds that very manifest) until a newer build is published.
    static func isHeldBack(_ build: ChannelBuild, state: InstallState) -> Bool {
        build.buildId == state.heldBack && state.currentIdentity?.manifest != build.manifest
    }

    /// What one step of a sync (a deployment holding `bundles` of `build`) does, decided on the install
    /// state in one transaction: up to date when the current deployment holds the manifest with those
    /// bundles; already ready when the ready one does; held back by the rule above. Otherwise staging
    /// resumes the recorded deployment when it holds the same manifest and bundles, or begins a new one
    /// under a new name. Staging of another step (`later`) of the same build is kept for its turn.
    static func step(
        _ state: inout InstallState, build: ChannelBuild, bundles: [String], all: [String],
        later: [[String]], summary: BuildSummary? = nil, inUse: (String) -> Bool
    ) -> SyncStep {
        let sha = build.manifest
        let settled: SyncStep? =
            if let current = state.current,
                state.currentIdentity?.holds(sha, bundles, all: all)
                    ?? (bundles == all && Deployment.buildID(of: current) == build.buildId)
            {
                .upToDate
            } else if state.ready?.holds(sha, bundles, all: all) == true {
                .alreadyReady
            } else if isHeldBack(build, state: state) {
                .heldBack
            } else {
                nil
            }
        if let settled {
            // A ready deployment of this build with another choice of bundles is not what the player wants now.
            if case .upToDate = settled, later.isEmpty, let ready = state.ready, ready.manifest == sha,
                !ready.holds(sha, bundles, all: all)
            {
                state.dropReady(ready)
            }
            // Whatever was being staged is not wanted any more, unless a later step of this build stages it.
            if !later.contains(where: { state.staging?.holds(sha, $0, all: all) == true }) { state.abandonStaging() }
            return settled
        }
        var identity = DeploymentIdentity(name: "", buildId: build.buildId, channel: build.channel, manifest: sha)
        identity.rollback = build.rollback
        identity.bundles = bundles
        identity.summary = summary
        if let staging = state.staging, staging.holds(sha, bundles, all: all), staging.channel == build.channel {
            identity.name = staging.name
        } else {
            identity.name = state.newDeploymentName(for: build.buildId, inUse: inUse)
        }
        state.beginStaging(identity, sequence: build.sequence)
        return .stage(identity)
    }

    /// The up-to-date check that reads no manifest: the live deployment holds `build`'s manifest with
    /// every bundle the player's choice makes of it (its recorded ``BuildSummary`` names the build's
    /// bundles), and nothing is staged or ready. Then the sync's steps come to one, the whole selection,
    /// and ``step`` finds it `.upToDate` without changing the state: the sync can say so at once. nil
    /// when any of that is not so (or the live record has no summary): the sync reads the manifest and
    /// decides step by step.
    static func upToDate(_ build: ChannelBuild, state: InstallState, chosen: [String]?, excluded: [String]) -> (
        BuildSummary, BundleSelection
    )? {
        guard !build.preload, state.staging == nil, state.ready == nil, state.current != nil,
            let live = state.currentIdentity, live.manifest == build.manifest, let summary = live.summary
        else { return nil }
        let selection = summary.selection(chosen: chosen, excluded: excluded)
        return live.holds(build.manifest, selection.wanted, all: summary.selection(chosen: nil).wanted)
            ? (summary, selection) : nil
    }

    /// What an apply does, given the recorded state, whether the ready tree is still the tree that was
    /// verified, whether a game holds `running.lock`, and the clock.
    enum Apply {
        /// Swap this ready deployment in.
        case swap(DeploymentIdentity)
        /// Nothing to swap in; `waiting` says why when the player waits for a locked preload.
        case nothing(waiting: PatchSyncError?)
        /// Refused; `dropReady` when the ready record names a tree changed by hand (it goes, and the
        /// next sync stages it anew).
        case refuse(PatchSyncError, dropReady: Bool)
    }

    /// The apply decision: a ready tree changed by hand is refused (74) and dropped; while the game runs
    /// nothing is swapped (75); with nothing ready, a locked preload says when it unlocks (75), or that
    /// this clock is a day or more past a release time signed metadata has not made (65: the unlock
    /// follows signed metadata, never this clock).
    static func apply(_ state: InstallState, readyIntact: Bool, gameRunning: Bool, now: Date) -> Apply {
        guard let ready = state.ready else {
            guard let preload = state.preload, !preload.released else { return .nothing(waiting: nil) }
            return .nothing(waiting: locked(preload, now: now))
        }
        guard readyIntact else {
            return .refuse(
                PatchSyncError(
                    .localIO,
                    "the staged tree of \(ready.name) was changed or removed after it was "
                        + "verified; it is not applied", remedy: "run `patchsync sync` again to stage it anew"),
                dropReady: true)
        }
        guard !gameRunning else {
            return .refuse(
                PatchSyncError(
                    .deferred, "the game is running; build \(ready.name) stays ready",
                    remedy: "apply when the game has exited (the launcher does it at the next start)",
                    reason: .gameRunning),
                dropReady: false)
        }
        return .swap(ready)
    }

    /// Why nothing is ready while a preload build is here but locked: its release time is to come or
    /// just past (75: try later), or this clock is ``clockSlack`` or more past it while signed metadata
    /// has not released it (65).
    static func locked(_ preload: PreloadStatus, now: Date) -> PatchSyncError {
        if now >= preload.releaseAt + clockSlack {
            return PatchSyncError(
                .refusedData,
                "build \(preload.buildId) is preloaded, and signed metadata has not released it: "
                    + "this machine's clock reads \(Repository.day(now)), past its release time "
                    + "\(Repository.day(preload.releaseAt)), but the unlock follows the publisher's signed "
                    + "metadata, not this clock",
                remedy: "the current build stays; if this clock is ahead, correct "
                    + "it; once the publisher releases the build, `patchsync sync` unlocks it")
        }
        return PatchSyncError(
            .deferred,
            "build \(preload.buildId) is preloaded (\(preload.summary)); nothing is ready to apply "
                + "before its release",
            remedy: "the current build stays; after the release, `patchsync sync` "
                + "unlocks it and the launcher applies it at the next start", reason: .notReleasedYet)
    }

    /// How long after the release time a locked preload is still the publisher's release running late
    /// (75) rather than this clock running ahead (65).
    static let clockSlack: TimeInterval = 86400
}

/// What a sync does about the channel's newest build, decided on the install state in one transaction.
enum SyncStep: Sendable {
    case upToDate, alreadyReady, heldBack
    case stage(DeploymentIdentity)

}
