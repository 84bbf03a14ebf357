import Foundation
import Synchronization

/// How a sync started from Swift runs: the same choices as `patchsync sync`'s options.
///
/// ```swift
/// var options = SyncOptions()
/// options.maxBytesPerSecond = 2 << 20      // the player's "limit download speed" setting
/// options.giveUpAfter = .seconds(60)
/// let session = install.startSync(options)
/// session.setMaxBytesPerSecond(nil)        // the player lifted the limit
/// ```
public struct SyncOptions: Sendable {
    /// A bandwidth cap for this run, over the configured one (``SyncSession/setMaxBytesPerSecond(_:)`` changes it).
    public var maxBytesPerSecond: Int?
    /// Background mode (``Syncer/discretionary``).
    public var discretionary = false
    /// The sync stops there, deferred, its progress kept.
    public var deadline: Date?
    /// After this long with no byte arriving, counted from the last byte (an origin that refuses
    /// connections waits it out, with `.offline` and `.online` events), the sync stops with
    /// ``PatchSyncError/Reason/stalled`` (exit 69). The default (2 minutes) is what a player waits
    /// through; nil: never, the sync waits until bytes come or it is stopped.
    public var giveUpAfter: Duration? = MirrorGroup.defaultGiveUp
    /// After this long with no byte arriving (10 s), a `.stalled` event says so, and another every few
    /// seconds while it lasts.
    public var stallAfter: Duration = NetworkQuiet.stallAfter
    /// The optional bundles to install, saved in the install's configuration before the sync (nil: as
    /// configured).
    public var bundles: [String]?
    /// A foreground sync that finds a discretionary one running asks it to stop, waits until its
    /// progress is recorded, and goes on at full speed (default true; false: it is deferred, otherSync).
    public var takeOver = true
    /// LAN shares to ask for chunks before the origin (`http://ADDRESS:PORT`), over the configured ones.
    public var peers: [String] = []
    /// The clock, power supply and network that a discretionary sync's conditions read.
    public var environment = SyncEnvironment.system

    public init() {}
}

/// Steers a running sync from outside: its bandwidth cap, now.
///
/// Thread-safety: a `Mutex` holds the client of the run and the cap asked for; any thread may set it.
public final class SyncControl: Sendable {
    private struct State {
        var client: HTTPClient?
        /// The cap asked for through this control, once asked (it then wins over the configuration).
        var asked: Int??
    }
    private let state = Mutex(State())

    public init() {}

    /// A new cap for the transfers running and to come (nil: none).
    public func setMaxBytesPerSecond(_ bytesPerSecond: Int?) {
        let client = state.withLock { s -> HTTPClient? in
            s.asked = .some(bytesPerSecond)
            return s.client
        }
        client?.setMaxBytesPerSecond(bytesPerSecond)
    }

    /// Whether a cap was asked for through this control (the configuration's then no longer applies).
    var wasAsked: Bool { state.withLock { $0.asked != nil } }

    /// The run's client: a cap asked before it existed applies now.
    func attach(_ client: HTTPClient) {
        let asked = state.withLock { s -> Int?? in
            s.client = client
            return s.asked
        }
        if let asked { client.setMaxBytesPerSecond(asked) }
    }

    /// A cap from the configuration, unless one was asked for here.
    func configured(_ bytesPerSecond: Int?) {
        guard let client = state.withLock({ $0.asked == nil ? $0.client : nil }) else { return }
        client.setMaxBytesPerSecond(bytesPerSecond)
    }
}

extension Syncer {
    /// A sync of `install` run as `options` say.
    public init(install: Install, options: SyncOptions, now: Date = Date()) {
        self.init(install: install, now: now)
        maxBytesPerSecond = options.maxBytesPerSecond
        discretionary = options.discretionary
        deadline = options.deadline
        giveUpAfter = options.giveUpAfter
        stallAfter = options.stallAfter
        environment = options.environment
        takeOver = options.takeOver
        bundles = options.bundles
        peers = options.peers
    }
}
