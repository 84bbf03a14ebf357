import Testing

@testable import PatchSync

/// The discretionary rate yields when request latency shows a queue, and climbs back slowly.
@Suite("Yielding to other traffic", .tags(.small))
struct DelayControllerTests {
    static let cap = 8.0 * 1024 * 1024

    /// Feeds `seconds` of samples, one every `every` seconds at `delay`, from `start`; returns the end time.
    @discardableResult
    static func feed(
        _ controller: inout DelayController, delay: Double, from start: Double, for seconds: Double,
        every: Double = 0.1
    ) -> Double {
        var time = start
        while time < start + seconds {
            _ = controller.observe(delay: delay, at: time)
            time += every
        }
        return time
    }

    @Test("with latency at its base the rate climbs from 1 MiB/s to the cap in seconds, never above it")
    func climbsToCap() {
        var controller = DelayController(ceiling: Self.cap)
        #expect(controller.rate == 1024 * 1024, "starts below the cap")
        Self.feed(&controller, delay: 0.02, from: 0, for: 2)
        #expect(controller.rate < Self.cap, "not there after 2 s")
        Self.feed(&controller, delay: 0.02, from: 2, for: 8)
        #expect(controller.rate == Self.cap)
    }

    @Test("queueing above the target halves the rate down to the floor; it recovers slowly once the queue is gone")
    func yieldsAndRecovers() {
        var controller = DelayController(ceiling: Self.cap)
        var time = Self.feed(&controller, delay: 0.02, from: 0, for: 15)
        #expect(controller.base == 0.02)
        time = Self.feed(&controller, delay: 0.02 + 0.2, from: time, for: 1)  // another flow fills a 200 ms queue
        #expect(controller.rate <= Self.cap / 8, "cut within a second")
        time = Self.feed(&controller, delay: 0.22, from: time, for: 5)
        #expect(controller.rate == controller.floor)
        time = Self.feed(&controller, delay: 0.02, from: time, for: 2)
        #expect(controller.rate > controller.floor && controller.rate < Self.cap / 4, "recovers slowly")
        Self.feed(&controller, delay: 0.02, from: time, for: 12)
        #expect(controller.rate == Self.cap)
    }

    @Test("the rate never climbs past twice what the link delivered, so a cut takes effect at once")
    func boundByDelivery() {
        var controller = DelayController(ceiling: 1024 * 1024 * 1024)
        var time = 0.0
        while time < 20 {  // a 20 MiB/s link: no queue, since the sync's own responses are short
            _ = controller.observe(delay: 0.02, at: time, achieved: 20 * 1024 * 1024)
            time += 0.05
        }
        #expect(controller.rate == 40 * 1024 * 1024, "at twice the delivered rate, not at the 1 GiB/s cap")
        _ = controller.observe(delay: 0.02, at: time, achieved: 2 * 1024 * 1024)
        #expect(controller.rate == 4 * 1024 * 1024, "follows the delivered rate down")
        for step in 1...3 {  // the current delay is the lowest of the last three samples
            _ = controller.observe(delay: 0.2, at: time + 0.3 + Double(step) / 100, achieved: 2 * 1024 * 1024)
        }
        #expect(controller.rate == 2 * 1024 * 1024, "then halves, from there")
    }

    @Test("one slow reply among fast ones is noise, not a queue")
    func singleOutlier() {
        var controller = DelayController(ceiling: Self.cap)
        let time = Self.feed(&controller, delay: 0.02, from: 0, for: 15)
        _ = controller.observe(delay: 0.5, at: time)
        #expect(controller.rate == Self.cap)
    }

    @Test("the base follows a path whose delay changed, after the minutes it remembers")
    func baseExpires() {
        var controller = DelayController(ceiling: Self.cap)
        Self.feed(&controller, delay: 0.01, from: 0, for: 5)
        Self.feed(&controller, delay: 0.2, from: 5, for: 660, every: 1)
        #expect(controller.base == 0.2)
        #expect(controller.rate > controller.floor * 4, "a longer path, no longer a queue")
    }
}
