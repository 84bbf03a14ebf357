import Foundation
import PatchSync
import Synchronization

/// SIGTERM and SIGINT stop a sync cleanly instead of killing it: the chunk writes in flight
/// finish and are recorded, and the sync exits 75. A second signal kills at once.
///
/// Thread-safety: a `Mutex` holds the sources, so that SignalStop is Sendable whether or not a
/// dispatch source is; they are set once in init and only cancelled in deinit.
final class SignalStop: Sendable {
    private let sources: Mutex<[any DispatchSourceSignal]>

    init(_ stop: SyncStop) {
        sources = Mutex(
            [SIGTERM, SIGINT].map { number in
                signal(number, SIG_IGN)
                let source = DispatchSource.makeSignalSource(signal: number, queue: .global())
                source.setEventHandler {
                    let name = number == SIGTERM ? "SIGTERM" : "SIGINT"
                    if stop.reason != nil {
                        signal(number, SIG_DFL)
                        raise(number)
                    }
                    stop.stop(.signal, "stopped by \(name)")
                }
                source.resume()
                return source
            })
    }

    deinit {
        sources.withLock { sources in
            for source in sources { source.cancel() }
        }
        signal(SIGTERM, SIG_DFL)
        signal(SIGINT, SIG_DFL)
    }
}
