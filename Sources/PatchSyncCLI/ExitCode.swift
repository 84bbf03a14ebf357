import ArgumentParser
import PatchSync

/// The exit status of each outcome: the contract that schedulers and launchers act on.
public enum ExitStatus {
    public static let success: Int32 = 0
    public static let usage: Int32 = 64
    public static let refusedData: Int32 = 65
    public static let originUnavailable: Int32 = 69
    public static let localIO: Int32 = 74
    public static let deferred: Int32 = 75
    public static let `internal`: Int32 = 1

    /// The status for a library error code.
    public static func of(_ code: PatchSyncError.Code) -> Int32 {
        switch code {
        case .usage: return usage
        case .refusedData: return refusedData
        case .originUnavailable: return originUnavailable
        case .localIO: return localIO
        case .deferred: return deferred
        case .internal: return `internal`
        }
    }
}
