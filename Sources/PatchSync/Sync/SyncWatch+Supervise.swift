import Foundation

extension SyncWatch {
    /// Runs `body`, cancelling it when a condition fails; its chunks in flight are finished and
    /// recorded before it returns, and the result is then a deferred error naming the condition.
    /// With `meter`, the same tick sends what the meter has due (progress, `.online`, `.stalled` after
    /// `stallAfter` with no byte and then every few seconds) and gives up after `giveUpAfter` with no
    /// byte, counted from the last byte (an origin that refuses connections included): origin
    /// unavailable (69), the chunks already verified kept. nil: it never gives up for the quiet.
    func supervise(
        state: StateStore, meter: SyncMeter? = nil, stallAfter: Duration = NetworkQuiet.stallAfter,
        giveUpAfter: Duration? = MirrorGroup.defaultGiveUp,
        _ body: @escaping @Sendable () async throws(PatchSyncError) -> SyncReport
    )
        async -> Result<SyncReport, PatchSyncError>
    {
        enum Finished: Sendable {
            case sync(Result<SyncReport, PatchSyncError>)
            case stop(DeferralReason, String)
            case gaveUp(Duration)
        }
        typealias Outcome = (
            result: Result<SyncReport, PatchSyncError>, stopped: (DeferralReason, String)?, gaveUp: Duration?
        )
        let (result, stopped, gaveUp) = await withTaskGroup(of: Finished?.self, returning: Outcome.self) {
            group -> Outcome in
            group.addTask {
                do throws(PatchSyncError) { return .sync(.success(try await body())) } catch {
                    return .sync(.failure(error))
                }
            }
            group.addTask {
                switch await watch(meter: meter, stallAfter: stallAfter, giveUpAfter: giveUpAfter) {
                case .stop(let reason, let message)?: return .stop(reason, message)
                case .gaveUp(let quiet)?: return .gaveUp(quiet)
                case nil: return nil
                }
            }
            var stopped: (DeferralReason, String)?
            var gaveUp: Duration?
            while let next = await group.next() {
                switch next {
                case .stop(let reason, let message)?:
                    stopped = (reason, message)
                    group.cancelAll()
                case .gaveUp(let quiet)?:
                    gaveUp = quiet
                    group.cancelAll()
                case .sync(let result)?:
                    group.cancelAll()
                    return (result, stopped, gaveUp)
                case nil: continue
                }
            }
            return (.failure(.cancelled), stopped, gaveUp)
        }
        // Only the stop it caused: a refusal (65) or a local failure (74) on the way keeps its own code.
        if let gaveUp, case .failure(let error) = result, error.code == .deferred || error.code == .originUnavailable {
            return .failure(Self.gaveUp(after: gaveUp, unreachable: meter?.unreachable))
        }
        guard let (reason, message) = stopped, case .failure(let error) = result, error.code == .deferred else {
            return result
        }
        do throws(PatchSyncError) { return .failure(try deferred(reason, message, state: state)) } catch {
            return .failure(error)
        }
    }

    /// Why a watched sync ends early: a condition failed, or it heard nothing for `giveUpAfter`.
    enum Watched: Sendable {
        case stop(DeferralReason, String)
        case gaveUp(Duration)
    }

    /// Looks at the conditions and the meter every ``tick`` until one says the sync ends; nil when the
    /// watch is cancelled first (the sync ended).
    private func watch(meter: SyncMeter?, stallAfter: Duration, giveUpAfter: Duration?) async -> Watched? {
        var tick = 1
        // The sleep alone tells a frozen process: not the time of the tick's own work (nmcli, a flush).
        var asleep: Range<ContinuousClock.Instant>?
        while !Task.isCancelled {
            if let (reason, message) = failing(tick: tick) { return .stop(reason, message) }
            if let quiet = meter?.tick(stallAfter: stallAfter, giveUpAfter: giveUpAfter, asleep: asleep) {
                return .gaveUp(quiet)
            }
            let sleeps = ContinuousClock.now
            try? await Task.sleep(for: Self.tick)
            asleep = sleeps..<ContinuousClock.now
            tick += 1
        }
        return nil
    }
}
