import Foundation

/// The connections a share holds, and which one makes way for a new one: decided from instants the
/// caller gives, so tests need no socket and no clock.
///
/// A connection is idle while it waits for a request (before its first, or between requests on a
/// keep-alive connection) and busy while it is answered. A new connection is always taken while an
/// idle one can make way for it: the one idle longest among those of its client address when that
/// address holds ``perAddress`` already, else the one idle longest of all when the share holds
/// ``limit``. None makes way while a request waits on it unread (the caller's `hasInput`), nor one
/// a request may be on its way to: a connection that answered a request only once idle for
/// ``settle`` (a peer reuses a connection while it has been idle less than two seconds: libcurl's
/// CURLOPT_MAXAGE_CONN of one second, counted in whole seconds), one never asked anything once idle for
/// ``fresh`` (a client sends its first request as it connects). Either way the client would see an
/// empty reply. So sockets opened and left silent, from one address or many, never keep a peer from
/// being served for long; connections all busy or just used turn one away (503 with a Retry-After of
/// a second).
///
/// While a client address was turned away in the last ``settle`` because every place was taken, the
/// places are shared: each address may hold `limit` over the number of addresses (those held and those
/// turned away), a connection of an address over that closes after its answer (`Connection: close`, so
/// its client does not reuse it), and such an address is not given a new one. So the players that came
/// first never keep a later one from the share (four players on 16 places: the fourth took nothing).
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
        /// It closes after the answer it gives now (its address was over its share of the places).
        var leaving = false
    }

    /// What becomes of a new connection.
    enum Admission: Sendable, Equatable {
        /// Served as connection `id`; `closing`: the socket of the idle connection that made way for it.
        case admitted(id: Int, closing: Int32?)
        /// Every connection that could make way is busy: turned away (503).
        case refused
    }

    /// How long a connection that answered a request must have been idle before it makes way: peers
    /// reuse a connection only while it has been idle less than two seconds (``HTTPClient``'s
    /// CURLOPT_MAXAGE_CONN of 1 for peer requests, which libcurl compares in whole seconds), and the
    /// share counts from when it wrote the answer, before the peer read it.
    static let settle = Duration.seconds(3)
    /// How long a connection never asked anything must have been idle before it makes way: a client
    /// sends its first request as it connects, a LAN brings it in a millisecond or two. Short, so that
    /// a flood of new silent sockets cannot hold every place for long either.
    static let fresh = Duration.milliseconds(100)

    /// The most connections held at once.
    let limit: Int
    /// The most connections held at once from one client address.
    let perAddress: Int
    /// The connections held, by id.
    private(set) var open: [Int: Connection] = [:]
    /// Client addresses turned away because every place was taken, and when last.
    private var waiting: [String: Instant] = [:]
    private var lastID = 0

    init(limit: Int, perAddress: Int) {
        self.limit = max(1, limit)
        self.perAddress = max(1, perAddress)
    }

    /// Takes a new connection (`fd`, from `address`) at `now`, idle until its first request: it is
    /// admitted when there is room or an idle connection to make it, refused when there is neither.
    /// `hasInput`: whether bytes wait unread on a socket (a request the share has not read yet).
    mutating func admit(fd: Int32, address: String, at now: Instant, hasInput: (Int32) -> Bool = { _ in false })
        -> Admission
    {
        waiting = waiting.filter { now - $0.value < Self.settle }
        let sameAddress = open.filter { $0.value.address == address }
        if let fair = fairShare(at: now), sameAddress.values.count(where: { !$0.leaving }) >= fair { return .refused }
        var makesWay: Int?
        if sameAddress.count >= perAddress {
            guard let idle = Self.longestIdle(sameAddress, at: now, hasInput: hasInput) else { return .refused }
            makesWay = idle
        } else if open.count >= limit {
            guard let idle = Self.longestIdle(open, at: now, hasInput: hasInput) else {
                if waiting.count < limit * 4 || waiting[address] != nil { waiting[address] = now }
                return .refused
            }
            makesWay = idle
        }
        let closing = makesWay.flatMap { open.removeValue(forKey: $0)?.fd }
        lastID += 1
        open[lastID] = Connection(fd: fd, address: address, idleSince: now)
        return .admitted(id: lastID, closing: closing)
    }

    /// Whether connection `id` should close after the answer it gives at `now`: its address holds more
    /// than its share of the places while another address waits for one.
    mutating func yields(_ id: Int, at now: Instant) -> Bool {
        guard let address = open[id]?.address, let fair = fairShare(at: now) else { return false }
        // Those already leaving are not counted: each connection over the share leaves, no more.
        guard open.values.count(where: { $0.address == address && !$0.leaving }) > fair else { return false }
        open[id]?.leaving = true
        return true
    }

    /// The places each address may hold at `now`, when an address was turned away in the last ``settle``
    /// (every place was taken): `limit` over the addresses held and waiting; nil when none waits.
    private func fairShare(at now: Instant) -> Int? {
        let waits = waiting.filter { now - $0.value < Self.settle }.keys
        guard !waits.isEmpty else { return nil }
        let addresses = Set(open.values.filter { !$0.leaving }.map(\.address)).union(waits)
        return max(1, limit / addresses.count)
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
    /// long) that may make way at `now`: idle for ``fresh`` when it was never asked anything, for
    /// ``settle`` when it answered, and no request waiting on it unread; nil when there is none.
    private static func longestIdle(_ connections: [Int: Connection], at now: Instant, hasInput: (Int32) -> Bool)
        -> Int?
    {
        connections.compactMap { id, connection -> (since: Instant, id: Int, fd: Int32)? in
            guard let since = connection.idleSince, now - since >= (connection.answered ? settle : fresh) else {
                return nil
            }
            return (since, id, connection.fd)
        }
        .sorted { ($0.since, $0.id) < ($1.since, $1.id) }
        .first { !hasInput($0.fd) }?.id
    }
}
