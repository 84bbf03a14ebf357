import Testing

@testable import PatchSync

/// Which connection a share keeps, driven by instants the tests choose: no socket, no waiting.
@Suite("LAN shares: the connections a share holds", .tags(.small))
struct ShareConnectionsTests {
    static let start = ContinuousClock.now

    /// `count` connections from `address`, one every `every` from `at`; their ids.
    static func open(
        _ connections: inout ShareConnections, _ count: Int, from address: String, fd: Int32 = 100,
        at: ContinuousClock.Instant,
        every: Duration = .milliseconds(1)
    ) -> [Int] {
        (0..<count).compactMap { index -> Int? in
            guard
                case .admitted(let id, _) = connections.admit(
                    fd: fd + Int32(index), address: address, at: at + every * index)
            else { return nil }
            return id
        }
    }

    @Test(
        "a share that holds its limit of silent connections still takes a new one: the one idle longest makes way (its socket is shut down), and a connection answering a request never does"
    )
    func idleMakesWay() {
        var connections = ShareConnections(limit: 4, perAddress: 4)
        let silent = (0..<4).flatMap {
            Self.open(&connections, 1, from: "10.0.0.\($0 + 1)", fd: Int32(10 + $0), at: Self.start + .seconds($0))
        }
        #expect(silent.count == 4)
        let asking = connections.busy(silent[0])
        #expect(asking, "the first one asks for a chunk")
        let admitted = connections.admit(fd: 50, address: "10.0.0.9", at: Self.start + .seconds(10))
        #expect(admitted == .admitted(id: silent[3] + 1, closing: 11), "the second, idle longest, makes way")
        let answered = connections.busy(silent[1])
        #expect(!answered, "the one that made way is not answered")
        #expect(connections.open.count == 4)
    }

    @Test(
        "one client address holds at most its share of the places: its own connection idle longest makes way for its next, and other addresses keep theirs"
    )
    func perAddress() {
        var connections = ShareConnections(limit: 16, perAddress: 3)
        let other = Self.open(&connections, 1, from: "10.0.0.2", fd: 9, at: Self.start)
        let flood = Self.open(
            &connections, 10, from: "10.0.0.66", at: Self.start + .seconds(1), every: ShareConnections.fresh)
        #expect(
            flood.count == 10, "each new one admitted: silent ones make way once they had the time to send a request")
        #expect(connections.open.values.filter { $0.address == "10.0.0.66" }.count == 3)
        #expect(connections.open[other[0]] != nil, "another address's connection, idle longer, is kept")
    }

    @Test(
        "regression: a connection that answered and is idle under three seconds never makes way (libcurl reuses one idle up to two: the peer saw an empty reply and sent the rest of its range to the origin); one idle three seconds or more does"
    )
    func justUsedStays() {
        var connections = ShareConnections(limit: 2, perAddress: 2)
        let ids = Self.open(&connections, 2, from: "10.0.0.3", at: Self.start)
        for id in ids {
            _ = connections.busy(id)
            connections.idle(id, at: Self.start)
        }
        #expect(connections.admit(fd: 70, address: "10.0.0.4", at: Self.start + .milliseconds(1999)) == .refused)
        #expect(connections.admit(fd: 71, address: "10.0.0.4", at: Self.start + .milliseconds(2999)) == .refused)
        #expect(
            connections.admit(fd: 72, address: "10.0.0.4", at: Self.start + .seconds(3))
                == .admitted(id: ids[1] + 1, closing: 100))
    }

    @Test(
        "regression: a connection whose request waits unread, or that connected under a tenth of a second ago, never makes way (the client sent, or is sending, its request: it would see an empty reply)"
    )
    func requestOnItsWayStays() {
        var connections = ShareConnections(limit: 2, perAddress: 2)
        let ids = Self.open(&connections, 2, from: "10.0.0.3", at: Self.start)
        #expect(
            connections.admit(fd: 70, address: "10.0.0.4", at: Self.start + .milliseconds(90)) == .refused,
            "both connected just now")
        let unread = connections.admit(fd: 71, address: "10.0.0.4", at: Self.start + .seconds(1)) { $0 == 100 }
        #expect(
            unread == .admitted(id: ids[1] + 1, closing: 101), "the first has a request waiting: the second makes way")
        let both = connections.admit(fd: 72, address: "10.0.0.5", at: Self.start + .seconds(5)) { _ in true }
        #expect(both == .refused, "every one has a request waiting")
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
        let after = connections.admit(
            fd: 62, address: "10.0.0.4", at: Self.start + .seconds(2) + ShareConnections.settle)
        #expect(after == .admitted(id: ids[1] + 1, closing: 101), "the one idle again makes way")
        connections.closed(ids[0])
        #expect(connections.open.count == 1)
    }

    @Test(
        "regression: while a client was turned away because every place was taken, the places are shared: the connections of a client over its share close after their answer, just enough of them, and it gets no new one, so a player that came last is served (four players on 16 places: the fourth took nothing from the share)"
    )
    func placesAreShared() {
        var connections = ShareConnections(limit: 16, perAddress: 8)
        var ids: [String: [Int]] = [:]
        for player in 1...3 {
            let address = "10.0.0.\(player)"
            ids[address] = Self.open(&connections, player == 3 ? 2 : 7, from: address, at: Self.start)
            for id in ids[address]! { _ = connections.busy(id) }
        }
        #expect(connections.open.count == 16)
        let alone = connections.yields(ids["10.0.0.1"]![0], at: Self.start)
        #expect(!alone, "nobody waits: nobody yields")
        let now = Self.start + .seconds(1)
        #expect(connections.admit(fd: 90, address: "10.0.0.4", at: now) == .refused, "every place answers a request")
        // The share is 16 over 4 addresses: 4 each. The first two players hold 7: three of each leave; the third holds 2.
        var leaving: [String: [Int]] = [:]
        for (address, held) in ids {
            leaving[address] = held.filter { connections.yields($0, at: now) }
        }
        #expect(
            leaving["10.0.0.1"]?.count == 3 && leaving["10.0.0.2"]?.count == 3 && leaving["10.0.0.3"]?.isEmpty == true,
            "\(leaving)")
        for id in leaving["10.0.0.1"]! { connections.closed(id) }
        #expect(
            connections.admit(fd: 91, address: "10.0.0.1", at: now) == .refused,
            "a client at its share gets no new place")
        guard case .admitted = connections.admit(fd: 92, address: "10.0.0.4", at: now + .milliseconds(100)) else {
            Issue.record("the player that waited is admitted")
            return
        }
        let stays = ids["10.0.0.1"]!.filter { !leaving["10.0.0.1"]!.contains($0) }
        let again = stays.map { connections.yields($0, at: now + .milliseconds(100)) }
        #expect(!again.contains(true), "at its share: it keeps its places")
        let late = connections.yields(stays[0], at: now + ShareConnections.settle)
        #expect(!late, "nobody turned away for a while: no share")
    }
}
