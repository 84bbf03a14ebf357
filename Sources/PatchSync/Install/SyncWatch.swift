import Foundation
import Synchronization

/// Stops a running sync from outside (a signal handler, a launcher): the sync finishes the chunk
/// writes in flight, records them, and ends with a deferred error (exit 75) that says why.
public final class SyncStop: Sendable {
    private let requested = Mutex<(reason: DeferralReason, message: String)?>(nil)

    public init() {}

    /// Asks the sync to stop; the first request's reason is the one reported.
    public func stop(_ reason: DeferralReason, _ message: String) {
        requested.withLock { if $0 == nil { $0 = (reason, message) } }
    }

    /// The stop asked for, if any.
    public var reason: (reason: DeferralReason, message: String)? { requested.withLock { $0 } }
}

/// Decides whether a sync may start, and watches while it runs: the deadline and stop requests
/// for every sync; the game, the battery, the play hours and a metered network for discretionary
/// ones. A deferred discretionary run records when the next one may try (``Backoff``).
struct SyncWatch: Sendable {
    let install: Install
    let config: InstallConfig
    let environment: SyncEnvironment
    let deadline: Date?
    let discretionary: Bool
    let stop: SyncStop?
    private let playHours: PlayHours?

    /// How often a running sync looks at its conditions: the game, the deadline and stop
    /// requests every tick; the battery and play hours every 10; the network every 300 (nmcli).
    static let tick = Duration.milliseconds(100)

    init(
        install: Install, config: InstallConfig, environment: SyncEnvironment, deadline: Date?,
        discretionary: Bool, stop: SyncStop?
    ) throws(PatchSyncError) {
        self.install = install
        self.config = config
        self.environment = environment
        self.deadline = deadline
        self.discretionary = discretionary
        self.stop = stop
        playHours = try config.playHours.map { texts throws(PatchSyncError) in try PlayHours(texts) }
    }

    /// The first condition that says "not now", checking the slower ones only when asked.
    func failing(tick: Int = 0) -> (reason: DeferralReason, message: String)? {
        if let requested = stop?.reason { return requested }
        if let deadline, environment.now() >= deadline {
            return (.deadline, "the deadline \(Self.format(deadline, environment.timeZone)) has come")
        }
        guard discretionary else { return nil }
        if install.gameIsRunning() { return (.gameRunning, "the game is running") }
        if install.takeOverRequested() { return (.tookOver, "a foreground sync takes over at full speed") }
        if tick % 10 == 0 {
            if config.deferOnBattery ?? true, environment.onBattery() {
                return (.onBattery, "the machine runs on battery (\(environment.powerSupplyRoot))")
            }
            if let playHours, playHours.contains(environment.now(), in: environment.timeZone) {
                return (.playHours, "it is inside the play hours \((config.playHours ?? []).joined(separator: ", "))")
            }
        }
        if tick % 300 == 0, config.deferOnMeteredNetwork ?? true,
            (config.networkMetered ?? environment.networkIsMetered()) == true
        {
            return (
                .meteredNetwork,
                "the network is metered"
                    + (config.networkMetered == true
                        ? " (config networkMetered)" : " (NetworkManager)")
            )
        }
        return nil
    }

    /// Before a run: refuses (exit 75, no network) when a condition fails (recording the deferral),
    /// and a discretionary run while backing off.
    func admit(state: StateStore) throws(PatchSyncError) {
        // A next attempt further away than the backoff's cap was recorded by a clock that was ahead: ignored.
        if discretionary, let last = try Self.deferral(in: state), environment.now() < last.nextAttempt,
            last.nextAttempt.timeIntervalSince(environment.now()) <= config.backoff.cap
        {
            throw PatchSyncError(
                .deferred,
                "backing off until \(Self.format(last.nextAttempt, environment.timeZone)) "
                    + "after \(last.count) deferred runs in a row (last: \(last.message))",
                remedy: "a scheduled run after that time continues; `patchsync sync` without "
                    + "--discretionary syncs now", reason: .backingOff)
        }
        if let (reason, message) = failing() { throw try deferred(reason, message, state: state) }
    }

    /// The error for a run that stops for `reason`; records the next attempt when the reason backs off.
    func deferred(_ reason: DeferralReason, _ message: String, state: StateStore) throws(PatchSyncError)
        -> PatchSyncError
    {
        var next: Date?
        if discretionary && reason.backsOff {
            let count = (try Self.deferral(in: state)?.count ?? 0) + 1
            let at = environment.now() + config.backoff.delay(after: count, random: environment.random())
            try Self.record(Deferral(reason: reason, message: message, count: count, nextAttempt: at), in: state)
            next = at
        }
        let retry =
            next.map { "a discretionary run tries again after \(Self.format($0, environment.timeZone))" }
            ?? "run sync again to continue"
        return PatchSyncError(
            .deferred, "sync deferred: \(message); the chunks already verified are kept",
            remedy: retry, reason: reason.errorReason)
    }

    /// The error of a sync given up after `quiet` with no byte: origin unavailable (69) for a stall,
    /// naming what each mirror last did when none could be reached (`unreachable`).
    static func gaveUp(after quiet: Duration, unreachable: String?) -> PatchSyncError {
        PatchSyncError(
            .originUnavailable,
            "no byte arrived from the origin for \(quiet.components.seconds) s (--give-up)"
                + (unreachable.map { "; no mirror could be reached: \($0)" } ?? "")
                + "; the chunks already verified are kept",
            remedy: "check the network and the remotes, then run sync again; it goes on where it stopped",
            reason: .stalled)
    }

    static func deferral(in state: StateStore) throws(PatchSyncError) -> Deferral? {
        try state.read().deferral
    }

    static func record(_ deferral: Deferral?, in state: StateStore) throws(PatchSyncError) {
        try state.update { $0.recordDeferral(deferral) }
    }

    static func format(_ date: Date, _ zone: TimeZone) -> String {
        let formatter = ISO8601DateFormatter()
        formatter.timeZone = zone
        return formatter.string(from: date)
    }
}

extension JSONEncoder {
    /// Dates as ISO 8601 text.
    static var iso: JSONEncoder {
        let encoder = JSONEncoder()
        encoder.dateEncodingStrategy = .iso8601
        return encoder
    }
}

extension JSONDecoder {
    static var iso: JSONDecoder {
        let decoder = JSONDecoder()
        decoder.dateDecodingStrategy = .iso8601
        return decoder
    }
}
