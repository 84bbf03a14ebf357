import Foundation
import Logging
import Synchronization

/// A byte count that concurrent requests add to. Thread-safety: a `Mutex`.
final class Tally: Sendable {
    private let value: Mutex<Int64>
    init(_ start: Int64) { value = Mutex(start) }
    /// The count now.
    var total: Int64 { value.withLock { $0 } }
    /// Adds `bytes`; returns the new total.
    @discardableResult
    func add(_ bytes: Int64) -> Int64 {
        value.withLock {
            $0 += bytes
            return $0
        }
    }
    /// Raises the count to `total` when higher; returns by how much.
    func raise(to total: Int64) -> Int64 {
        value.withLock { current in
            defer { current = max(current, total) }
            return max(0, total - current)
        }
    }
}
