import Foundation

/// Why a sync did not run, or stopped before the end, with its progress kept (exit 75).
public enum DeferralReason: String, Codable, Sendable, CaseIterable {
    case gameRunning, onBattery, playHours, meteredNetwork, backingOff, deadline, signal
    /// A launcher's pause (``SyncStop/stop(_:_:)`` with this reason, or ``SyncSession/cancel()``).
    case playerPaused
    /// A foreground sync took over from this discretionary one.
    case tookOver

    /// The reason the error says.
    var errorReason: PatchSyncError.Reason {
        switch self {
        case .gameRunning: return .gameRunning
        case .onBattery: return .onBattery
        case .playHours: return .playHours
        case .meteredNetwork: return .metered
        case .backingOff: return .backingOff
        case .deadline: return .deadline
        case .signal: return .stopped
        case .playerPaused: return .playerPaused
        case .tookOver: return .otherSync
        }
    }

    /// Whether the next discretionary run waits (with backoff) after this one: conditions of the
    /// machine do; a deadline or a signal ends a run that the scheduler meant to end.
    var backsOff: Bool { [.gameRunning, .onBattery, .playHours, .meteredNetwork].contains(self) }
}

/// A deferred run, as recorded in state.db for the next run and for `status`.
public struct Deferral: Codable, Sendable, Equatable {
    public var reason: DeferralReason
    public var message: String
    /// Discretionary runs deferred in a row.
    public var count: Int
    /// A discretionary run started before then exits 75 at once, without network traffic.
    public var nextAttempt: Date
}
