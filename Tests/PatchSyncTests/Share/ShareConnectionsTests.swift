import Testing

@testable import PatchSync

/// Which connection a share keeps, driven by instants the tests choose: no socket, no waiting.
@Suite("LAN shares: the connections a share holds", .tags(.small))
struct ShareConnectionsTests {
    static let start = ContinuousClock.now

    /// `count` connections from `address`, one a millisecond from `at`; their ids.
    static func open(
        _ connections: inout ShareConnections, _ count: Int, from address: String, fd: Int32 = 100, at: ContinuousClock.Instant
    ) -> [Int] {
        (0..<count).compactMap { index -> Int? in
            guard case .admitted(let id, _) = connections.admit(fd: fd + Int32(index), address: address, at: at + .milliseconds(index))
            else { return nil }
            return id
        }
    }

    @Test("a share that holds its limit of silent connections still takes a new one: the one idle longest makes way (its socket is shut down), and a connection answering a request never does")
    func idleMakesWay() {
        var connections = ShareConnections(limit: 4, perAddress: 4)
        let silent = (0..<4).flatMap { Self.open(&connections, 1, from: "10.0.0.\($0 + 1)", fd: Int32(10 + $0), at: Self.start + .seconds($0)) }
        #expect(silent.count == 4)
        let asking = connections.busy(silent[0])
        #expect(asking, "the first one asks for a chunk")
        let admitted = connections.admit(fd: 50, address: "10.0.0.9", at: Self.start + .seconds(10))
        #expect(admitted == .admitted(id: silent[3] + 1, closing: 11), "the second, idle longest, makes way")
        let answered = connections.busy(silent[1])
        #expect(!answered, "the one that made way is not answered")
        #expect(connections.open.count == 4)
    }

    @Test("one client address holds at most its share of the places: its own connection idle longest makes way for its next, and other addresses keep theirs")
    func perAddress() {
        var connections = ShareConnections(limit: 16, perAddress: 3)
        let other = Self.open(&connections, 1, from: "10.0.0.2", fd: 9, at: Self.start)
        let flood = Self.open(&connections, 10, from: "10.0.0.66", at: Self.start + .seconds(1))
        #expect(flood.count == 10, "each new one admitted: silent ones make way at once")
        #expect(connections.open.values.filter { $0.address == "10.0.0.66" }.count == 3)
        #expect(connections.open[other[0]] != nil, "another address's connection, idle longer, is kept")
    }

    @Test("regression: a connection idle under a second never makes way (a peer may be sending it a request: it saw an empty reply, 3 of them dropped the seed of two players in four); one idle a second or more does")
    func justUsedStays() {
        var connections = ShareConnections(limit: 2, perAddress: 2)
        let ids = Self.open(&connections, 2, from: "10.0.0.3", at: Self.start)
        for id in ids {
            _ = connections.busy(id)
            connections.idle(id, at: Self.start)
        }
        #expect(connections.admit(fd: 70, address: "10.0.0.4", at: Self.start + .milliseconds(900)) == .refused)
        #expect(connections.admit(fd: 71, address: "10.0.0.4", at: Self.start + .milliseconds(1000)) == .admitted(id: ids[1] + 1, closing: 100))
    }

    @Test("only when every connection that could make way is answering a request is a new one turned away (503)")
    func allBusyRefuses() {
        var connections = ShareConnections(limit: 2, perAddress: 2)
        let ids = Self.open(&connections, 2, from: "10.0.0.3", at: Self.start)
        let answering = ids.map { connections.busy($0) }
        #expect(answering == [true, true])
        let another = connections.admit(fd: 60, address: "10.0.0.4", at: Self.start + .seconds(1))
        let same = connections.admit(fd: 61, address: "10.0.0.3", at: Self.start + .seconds(1))
        #expect(another == .refused && same == .refused)
        connections.idle(ids[1], at: Self.start + .seconds(2))
        let after = connections.admit(fd: 62, address: "10.0.0.4", at: Self.start + .seconds(3))
        #expect(after == .admitted(id: ids[1] + 1, closing: 101), "the one idle again makes way")
        connections.closed(ids[0])
        #expect(connections.open.count == 1)
    }
}
