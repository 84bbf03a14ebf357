import Foundation

/// A rate that yields to other traffic, in the spirit of LEDBAT (RFC 6817): the lowest request
/// latency seen lately is the path's base delay; latency above it is queueing in some buffer on
/// the way, which means the link is full. Above `target` the rate halves (at most once per
/// `decreaseInterval`); below it the rate climbs back (at most doubling per second, the more the
/// further below target, and never past twice what the link delivered lately), so taking a
/// 20 MiB/s link back from the floor takes about ten seconds.
///
/// The latency samples are each request's time to first byte, taken at the first byte on the
/// transfer thread. They see other traffic's queue only if the sync's own responses do not fill
/// the link's buffer: hence short requests on few connections while yielding
/// (``HTTPClient/requestBudget``).
struct DelayController: Sendable {
    /// The cap: the rate never goes above it.
    let ceiling: Double
    /// The rate never goes below this (a sync always advances).
    let floor: Double
    /// Queueing delay tolerated before yielding, seconds.
    var target = 0.05
    /// How much the rate may grow per second with no queueing at all.
    var growthPerSecond = 1.0
    /// At most one halving per this many seconds: the effect of a cut takes a round trip or so.
    var decreaseInterval = 0.25
    private(set) var rate: Double
    /// The lowest delay of each of the last minutes: the base is the lowest of them.
    private var minima: [(minute: Int, delay: Double)] = []
    /// The latest few samples: the current delay is their lowest (one slow reply is noise).
    private var recent: [Double] = []
    private var lastUpdate: Double?
    private var lastDecrease = -Double.infinity

    init(ceiling: Double) {
        self.ceiling = max(1, ceiling)
        floor = min(self.ceiling, 64 * 1024)
        rate = min(self.ceiling, 1024 * 1024)
    }

    /// Base delay over the last ten minutes.
    var base: Double? { minima.map(\.delay).min() }

    /// Takes one latency sample (seconds) at `time` (seconds on any monotonic clock); returns the new
    /// rate. `achieved` is the rate that bytes actually arrived at lately: growth stops at twice
    /// that, so the rate never runs far ahead of the link (from there a cut would take many halvings).
    mutating func observe(delay: Double, at time: Double, achieved: Double? = nil) -> Double {
        let minute = Int(time / 60)
        if let last = minima.last, last.minute == minute {
            minima[minima.count - 1].delay = min(last.delay, delay)
        } else {
            minima.append((minute, delay))
        }
        minima.removeAll { $0.minute <= minute - 10 }
        recent.append(delay)
        if recent.count > 3 { recent.removeFirst() }
        let queueing = (recent.min() ?? delay) - (base ?? delay)
        let elapsed = min(4, max(0, time - (lastUpdate ?? time)))
        lastUpdate = time
        if queueing > target {
            if time - lastDecrease >= decreaseInterval {
                rate = max(floor, rate / 2)
                lastDecrease = time
                recent.removeAll()  // judge the cut by what comes after it
            }
        } else {
            let headroom = (target - queueing) / target
            let bound = min(ceiling, max(floor, 2 * (achieved ?? .infinity)))
            rate = max(min(rate, bound), min(bound, rate * (1 + growthPerSecond * headroom * elapsed)))
        }
        return rate
    }
}
