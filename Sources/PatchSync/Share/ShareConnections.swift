import Foundation

/// The connections a share holds, and which one makes way for a new one: decided from instants the
/// caller gives, so tests need no socket and no clock.
///
/// A connection is idle while it waits for a request (before its first, or between requests on a
/// keep-alive connection) and busy while it is answered. A new connection is always taken while an
/// idle one can make way for it: the one idle longest among those of its client address when that
/// address holds ``perAddress`` already, else the one idle longest of all when the share holds
/// ``limit``. A connection that answered a request makes way only once idle for ``settle``: a peer
/// reuses a connection only while it has been idle less than that (its client's maximum connection
/// age), so the one closed is never one a request is on its way to (the client would see an empty
/// reply). One that never had a request makes way at once. So sockets opened and left silent, from one
/// address or many, never keep a peer from being served; connections all busy or just used turn one
/// away (503 with a Retry-After of a second).
struct ShareConnections: Sendable {
    typealias Instant = ContinuousClock.Instant

    /// One connection the share holds.
    struct Connection: Sendable {
        /// Its socket: shut down (under the share's lock) when it makes way for another.
        let fd: Int32
        /// Its client's address, as text.
        let address: String
        /// Since when it waits for a request; nil while it is answered.
        var idleSince: Instant?
        /// It answered a request: its client may be sending the next one on it.
        var answered = false
    }

    /// What becomes of a new connection.
    enum Admission: Sendable, Equatable {
        /// Served as connection `id`; `closing`: the socket of the idle connection that made way for it.
        case admitted(id: Int, closing: Int32?)
        /// Every connection that could make way is busy: turned away (503).
        case refused
    }

    /// How long a connection must have been idle before it makes way: peers reuse a connection only
    /// while it has been idle less than this (``HTTPClient``'s CURLOPT_MAXAGE_CONN for peer requests).
    static let settle = Duration.seconds(1)

    /// The most connections held at once.
    let limit: Int
    /// The most connections held at once from one client address.
    let perAddress: Int
    /// The connections held, by id.
    private(set) var open: [Int: Connection] = [:]
    private var lastID = 0

    init(limit: Int, perAddress: Int) {
        self.limit = max(1, limit)
        self.perAddress = max(1, perAddress)
    }

    /// Takes a new connection (`fd`, from `address`) at `now`, idle until its first request: it is
    /// admitted when there is room or an idle connection to make it, refused when there is neither.
    mutating func admit(fd: Int32, address: String, at now: Instant) -> Admission {
        let sameAddress = open.filter { $0.value.address == address }
        var makesWay: Int?
        if sameAddress.count >= perAddress {
            guard let idle = Self.longestIdle(sameAddress, before: now - Self.settle) else { return .refused }
            makesWay = idle
        } else if open.count >= limit {
            guard let idle = Self.longestIdle(open, before: now - Self.settle) else { return .refused }
            makesWay = idle
        }
        let closing = makesWay.flatMap { open.removeValue(forKey: $0)?.fd }
        lastID += 1
        open[lastID] = Connection(fd: fd, address: address, idleSince: now)
        return .admitted(id: lastID, closing: closing)
    }

    /// Connection `id` has a request to answer: busy from now. False when it made way for another
    /// meanwhile (it is not answered).
    mutating func busy(_ id: Int) -> Bool {
        guard open[id] != nil else { return false }
        open[id]?.idleSince = nil
        return true
    }

    /// Connection `id` answered its request at `now` and waits for the next one.
    mutating func idle(_ id: Int, at now: Instant) {
        open[id]?.idleSince = now
        open[id]?.answered = true
    }

    /// Connection `id` ended (or made way for another before).
    mutating func closed(_ id: Int) { open[id] = nil }

    /// The id of the connection idle longest among `connections` (the oldest first when two were idle as
    /// long) that may make way: one never asked anything, or one that answered and is idle since
    /// `before` or earlier; nil when there is none.
    private static func longestIdle(_ connections: [Int: Connection], before: Instant) -> Int? {
        connections.compactMap { id, connection in
            connection.idleSince.flatMap { since in !connection.answered || since <= before ? (since: since, id: id) : nil }
        }
        .min { ($0.since, $0.id) < ($1.since, $1.id) }?.id
    }
}
