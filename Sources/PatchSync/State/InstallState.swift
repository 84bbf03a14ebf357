import Foundation

/// What a deployment holds: which build, from which channel, and the SHA-256 of its signed
/// manifest target, which names its content. Two deployments with the same identity hold the
/// same files; a deployment name is never given to other content.
public struct DeploymentIdentity: Codable, Sendable, Hashable {
    /// The folder name in `builds/` or `.patchsync/staging/` (`<build id>` or `<build id>@<n>`).
    public var name: String
    public var buildId: String
    public var channel: String
    /// SHA-256 of the manifest target as targets metadata signs it.
    public var manifest: String
    /// The staged tree's ``TreeSeal`` when it was verified complete (set when it becomes ready).
    public var seal: String?
    /// Set when the publisher put this build back on its channel (`repo rollback`): from which build, and why.
    public var rollback: RollbackNote?
    /// The bundles the deployment holds, in download order (nil: all of the build's).
    public var bundles: [String]?
    /// The build's bundles, sizes and counts, recorded when its staging begins (nil in records written
    /// before summaries were kept: the manifest is read instead).
    public var summary: BuildSummary?
    /// The key its files' records (sizes, modes, hashes, stat cache) are kept under in state.db, when not
    /// its name: a build staged in a recycled folder takes over that folder's records, so the files it has
    /// unchanged keep theirs and only the changed ones are written (``InstallState/recycle(_:into:)``).
    public var records: String?

    /// The key of its files' records in state.db.
    var recordsKey: String { records ?? name }

    /// Whether the deployment holds manifest `sha` with exactly `bundles` (`all`: every bundle of it).
    func holds(_ sha: String, _ bundles: [String], all: [String]) -> Bool {
        manifest == sha && (self.bundles ?? all) == bundles
    }
}

/// The install's state as one value: what is live, kept, staged and ready, what the channel has
/// shown, and the background agent's bookkeeping. It is read and written as a whole, in one
/// SQLite transaction (``StateStore/update(_:_:)``), and changes only through the transitions below,
/// so a kill at any instant leaves either the state before a transition or the state after it.
public struct InstallState: Codable, Sendable, Equatable {
    /// The format of this value in state.db; a newer one is refused with a clear message.
    public static let formatVersion = 1
    public private(set) var version = InstallState.formatVersion
    /// The deployment `current` points at, as recorded (the symlink wins after a crash: ``reconcile(link:linkComplete:present:)``).
    public private(set) var current: String?
    /// Deployments applied, oldest first (at most ``historyLimit``).
    public private(set) var history: [String] = []
    /// What the deployments of `history` hold.
    public private(set) var deployed: [String: DeploymentIdentity] = [:]
    /// The deployment being assembled in staging/.
    public private(set) var staging: DeploymentIdentity?
    /// A complete, verified deployment in staging/ waiting for apply.
    public private(set) var ready: DeploymentIdentity?
    /// The kept deployment whose folder the one being staged (then ready) was started from
    /// (``recycle(_:into:)``): its files that the new build has unchanged stay where they are, the rest
    /// is brought forward. It is no rollback target any more; nil when staging started from an empty
    /// folder, and once the build it became is applied or dropped.
    public private(set) var recycling: String?
    /// A build rolled back from: sync does not stage it again until a newer one is published.
    public private(set) var heldBack: String?
    /// The highest sequence seen per channel (rollback protection).
    public private(set) var seenSequence: [String: Int] = [:]
    /// The last discretionary run was deferred: why, and when the next may try.
    public private(set) var deferral: Deferral?
    /// Gives the deployments of manifest `sha` that have no summary this one (records written before
    /// summaries were kept): their next up-to-date sync reads no manifest.
    mutating func recordSummary(_ summary: BuildSummary, for sha: String) {
        for (name, identity) in deployed where identity.manifest == sha && identity.summary == nil {
            deployed[name]?.summary = summary
        }
        if ready?.manifest == sha, ready?.summary == nil { ready?.summary = summary }
        if staging?.manifest == sha, staging?.summary == nil { staging?.summary = summary }
    }

    /// How the files of the staged or ready build come.
    public private(set) var routes: InstallStatus.Routes?
    /// A sync running now, with its progress.
    public private(set) var running: RunningSync?
    /// SHA-256 of the manifest target the newest sync set out to install (`status` and `bundles` show its bundles).
    public private(set) var newestManifest: String?
    /// A preload build the channel offers and this install fetches ahead of its release.
    public private(set) var preload: PreloadStatus?
    /// Deployment names handed out so far with a suffix: the next one is `@<n+1>`.
    public private(set) var suffixesUsed = 1
    /// The totals of the update being installed: a restarted sync counts on the same scale.
    public private(set) var update: UpdateRecord?

    static let historyLimit = 16

    public init() {}
}

extension InstallState {
    /// A deployment name for `build` that this install has not used for other content: the build id
    /// itself when nothing recorded or on disk uses it, else the build id with a suffix never used before.
    mutating func newDeploymentName(for build: String, inUse: (String) -> Bool) -> String {
        if !isRecorded(build) && !inUse(build) { return build }
        while true {
            suffixesUsed += 1
            let name = "\(build)@\(suffixesUsed)"
            if !isRecorded(name) && !inUse(name) { return name }
        }
    }

    /// Whether any record names `name` (as a deployment, or as the key of a deployment's file records).
    func isRecorded(_ name: String) -> Bool {
        current == name || history.contains(name) || staging?.name == name || ready?.name == name
            || recycling == name || [staging, ready].contains { $0?.records == name }
            || deployed.values.contains { $0.records == name }
    }

    /// The key of deployment `name`'s file records in state.db (its name unless it took over a recycled
    /// folder's).
    func recordsKey(of name: String) -> String {
        if let staging, staging.name == name { return staging.recordsKey }
        if let ready, ready.name == name { return ready.recordsKey }
        return deployed[name]?.recordsKey ?? name
    }

    /// Staging of `identity` begins (or resumes, when it is the one recorded); a build seen on the
    /// channel is no longer held back unless it is the held-back one.
    mutating func beginStaging(_ identity: DeploymentIdentity, sequence: Int) {
        if staging?.name != identity.name { recycling = nil }
        let records = staging?.name == identity.name ? staging?.records : nil
        staging = identity
        if identity.records == nil { staging?.records = records }  // a resume keeps the folder's records
        seenSequence[identity.channel] = max(seenSequence[identity.channel] ?? 0, sequence)
        if heldBack != identity.buildId { heldBack = nil }
        if routes?.buildId != identity.name { routes = nil }
    }

    /// The deployment being staged is complete: it becomes ready, replacing an older ready one
    /// (returned, so its folder can go).
    mutating func finishStaging(_ name: String, seal: String?) -> DeploymentIdentity? {
        guard var staged = staging, staged.name == name else { return nil }
        let superseded = ready
        staged.seal = seal
        ready = staged
        staging = nil
        return superseded?.name == name ? nil : superseded
    }

    /// A repair of the live build begins staging under a name of its own; what the channel has
    /// shown and a build held back by a rollback stay as they are.
    mutating func beginRepair(_ identity: DeploymentIdentity) {
        if staging?.name != identity.name { recycling = nil }
        staging = identity
        if routes?.buildId != identity.name { routes = nil }
    }

    /// Staging stops for good (its content is no longer wanted).
    mutating func abandonStaging() {
        staging = nil
        recycling = nil
    }

    /// The folder of kept deployment `name` becomes the start of the one being staged, `staged`. Its name
    /// stays in the history (never given to other content); with its folder gone, rollback has nothing
    /// there to go back to. Only a kept deployment that is neither current nor ready is taken; returns
    /// whether it was.
    mutating func recycle(_ name: String, into staged: String) -> Bool {
        guard staging?.name == staged, name != staged, name != current, name != ready?.name,
            history.contains(name)
        else { return false }
        recycling = name
        let records = recordsKey(of: name)
        staging?.records = records
        // Its records are the staging's now; should its folder come back (by hand), it has none of its own.
        deployed[name]?.records = records + "#recycled"
        return true
    }

    /// The recycled folder is not (or no longer) where the staging is: a kill came between the record and
    /// the move, or the move failed; the build keeps its folder in builds/ and its records.
    mutating func recycleUndone(_ name: String) {
        guard recycling == name else { return }
        recycling = nil
        if let key = staging?.records { deployed[name]?.records = key == name ? nil : key }  // its own again
        staging?.records = nil
    }

    /// The build whose folder the next recycling takes, when `buildsKept` are kept: the one the next apply
    /// would retire (with two kept builds: the previous one), unless it is current or ready.
    func recyclable(buildsKept: Int) -> String? {
        guard history.count >= buildsKept, recycling == nil else { return nil }
        let oldest = history[history.count - buildsKept]
        return oldest == current || oldest == ready?.name || oldest == staging?.name ? nil : oldest
    }

    /// `name` became current by an apply.
    mutating func applied(_ identity: DeploymentIdentity) {
        current = identity.name
        // Another deployment of the same manifest (other bundles, a repaired copy) is no build to roll back
        // to: it leaves the history, so `previous` stays the build before, and apply retires its folder.
        history = Array(
            (history.filter { $0 != identity.name && deployed[$0]?.manifest != identity.manifest }
                + [identity.name]).suffix(Self.historyLimit))
        deployed[identity.name] = identity
        deployed = deployed.filter { history.contains($0.key) }
        if ready?.name == identity.name { ready = nil }
        if staging == nil && ready == nil { recycling = nil }
        if routes?.buildId == identity.name { routes = nil }
        if preload?.buildId == identity.buildId { preload = nil }  // unlocked and live now
    }

    /// The ready record goes (its tree was changed by hand, or another choice of bundles is wanted now),
    /// unless another deployment became ready meanwhile.
    mutating func dropReady(_ identity: DeploymentIdentity) {
        if ready == identity { ready = nil }
        if staging == nil && ready == nil { recycling = nil }
    }

    /// How the files of the build being staged come.
    mutating func recordRoutes(_ routes: InstallStatus.Routes) { self.routes = routes }

    /// The manifest target the newest sync set out to install.
    mutating func recordNewest(_ manifest: String) { newestManifest = manifest }

    /// The totals of the update being installed.
    mutating func recordUpdate(_ update: UpdateRecord?) { self.update = update }

    /// A preload's progress, or nil when no preload is offered (or it went live).
    mutating func recordPreload(_ preload: PreloadStatus?) { self.preload = preload }

    /// A sync running now, with its progress (nil once it ends).
    mutating func recordRunning(_ running: RunningSync?) { self.running = running }

    /// Why the last discretionary run was deferred and when the next may try (nil: not deferred).
    mutating func recordDeferral(_ deferral: Deferral?) { self.deferral = deferral }

    /// One step back: the previous deployment is current again, and the build rolled back from is
    /// held back (a ready copy of it is dropped).
    mutating func rolledBack(to previous: String) {
        recycleUndone(previous)  // its folder was still in builds/, its records its own
        guard let from = current ?? history.last, from != previous else { return }  // recorded already
        current = previous
        if history.last == from { history.removeLast() }
        heldBack = Deployment.buildID(of: from)
        if ready?.buildId == heldBack { ready = nil }
    }

    /// What ``reconcile(link:linkComplete:present:)`` leaves to do to the `current` link.
    enum LinkRepair: Sendable, Equatable {
        /// The link and the records agree; nothing changed.
        case inLine
        /// The records changed to agree with the link (a flip recorded, a live build whose folder is gone forgotten).
        case recorded
        /// Point `current` at this recorded deployment (again): the link was removed, or names no complete deployment.
        case flip(to: String)
        /// Remove `current`: it names no complete deployment, and none is recorded current.
        case unlink
    }

    /// Brings the records and the `current` symlink (`link`) in line after a crash between a flip and its
    /// record, or a change by hand, and says what becomes of the link. A recorded live build whose folder
    /// is gone (`present` false) is no longer installed: the next sync fetches it again. A link on a
    /// complete deployment (`linkComplete`) finishes what flipped it: a rollback when it is the one before,
    /// an apply when it is the ready or a recorded deployment (the recorded one becomes previous), and
    /// with nothing recorded current (a lost state database) it is adopted. Any other link goes back to
    /// the recorded deployment (put back when it was removed), or goes when none is.
    mutating func reconcile(link: String?, linkComplete: Bool, present: (String) -> Bool) -> LinkRepair {
        let before = self
        if let current, !present(current) { forgetCurrent() }
        if link == current { return self == before ? .inLine : .recorded }
        if let link, linkComplete {
            if history.count >= 2, history[history.count - 2] == link {
                rolledBack(to: link)
                return .recorded
            }
            if let identity = ready?.name == link ? ready : deployed[link] {
                applied(identity)
                return .recorded
            }
            if current == nil, ready?.name != link {
                // Nothing recorded (a state database lost or reset): the complete build the link names is
                // the live one, adopted as it is rather than removed and downloaded again.
                current = link
                history = Array((history.filter { $0 != link } + [link]).suffix(Self.historyLimit))
                return .recorded
            }
        }
        // An apply undone: a ready tree damaged since it was moved into builds/ is staged anew.
        if let ready, ready.name == link { dropReady(ready) }
        return current.map { LinkRepair.flip(to: $0) } ?? .unlink
    }

    /// The live build's folder is gone (deleted by hand, by a cleaner): nothing is current, so a sync stages
    /// the build again. Its name stays in the history (never given to other content: the copy staged gets a
    /// new one), and leaves it when that copy is applied.
    private mutating func forgetCurrent() { current = nil }

    /// The deployment before the current one.
    var previous: String? { history.count >= 2 ? history[history.count - 2] : nil }

    /// The identity of the current deployment, when recorded.
    var currentIdentity: DeploymentIdentity? { current.flatMap { deployed[$0] } }

    /// The one rule for what an install keeps: the last `buildsKept` deployments applied (rollback goes
    /// back through them), the current one, and the ones being staged and ready. Their folders, manifests
    /// and records stay; apply retires other builds and housekeeping deletes other manifests.
    func kept(buildsKept: Int) -> Set<String> {
        Set(history.suffix(buildsKept) + [current, staging?.name, ready?.name].compactMap { $0 })
    }
}
