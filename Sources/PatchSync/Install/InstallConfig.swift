import Foundation

/// `.patchsync/config.json`: which origin and channel an install follows, and transfer policy.
public struct InstallConfig: Codable, Sendable, Equatable {
    /// Mirrors of the origin, tried in order.
    public var remotes: [String]
    public var channel: String
    /// The optional bundles the player chose (`bundles add`/`remove`, `init --bundle`); nil installs every
    /// optional bundle. Required bundles are always installed.
    public var bundles: [String]?
    /// With `bundles` nil: optional bundles left out (`bundles remove`); every other optional bundle is
    /// installed, including ones a later build adds.
    public var excludedBundles: [String]?
    /// Connections in total; transfers run at most this many requests at once.
    public var maxConnections: Int?
    /// The largest byte range asked in one request.
    public var maxRequestBytes: Int?
    /// Fetch an unneeded gap up to this size rather than start another request.
    public var coalesceGapBytes: Int?
    /// LAN shares (`patchsync share` on another machine, `http://ADDRESS:PORT`) asked for chunks before
    /// the origin; every chunk is checked against the signed manifest whoever sends it.
    public var peers: [String]?
    /// Look for shares of this repository with DNS-SD (Avahi) at each sync (default true; nothing is
    /// found where Avahi does not run).
    public var discoverPeers: Bool?
    /// A PEM file of extra certificate authorities for https remotes.
    public var caFile: String?
    /// How many applied builds stay in builds/ (current and previous by default; at least 1).
    public var keepBuilds: Int?
    /// Slow retrieval: a transfer below `lowSpeedBytesPerSecond` for `lowSpeedSeconds` is cut off
    /// (and another mirror or a retry takes over); defaults 1024 B/s for 30 s.
    public var lowSpeedBytesPerSecond: Int?
    public var lowSpeedSeconds: Int?
    /// Failed requests in a row, with no byte delivered between them, after which a sync gives up
    /// (default 8, or the connections plus 2 when more: a blip that fails every request in flight is survived).
    public var failureStreak: Int?
    /// A metadata refresh still running after this many seconds is abandoned (default 120; in a sync never
    /// before its give-up time, which decides while no byte arrives).
    public var refreshDeadlineSeconds: Int?
    /// One request still running after this many seconds is cut off and retried (default: 60 s
    /// plus its size at the low-speed limit, so a transfer just above the limit still ends).
    public var requestTimeoutSeconds: Int?
    /// One bandwidth cap for all transfers together, in bytes per second (`sync --max-rate` overrides it).
    public var maxBytesPerSecond: Int?

    // Discretionary syncs (`sync --discretionary`): when they run and how gently.
    /// The cap of a discretionary sync, bytes per second (default 8 MiB/s), under which it also
    /// yields to other traffic; `--max-rate` overrides it.
    public var discretionaryMaxBytesPerSecond: Int?
    /// Defer while running on battery (default true).
    public var deferOnBattery: Bool?
    /// Local times the player plays, when a discretionary sync defers: "18:00-23:30" (may wrap midnight).
    public var playHours: [String]?
    /// Whether the network is metered: nil asks NetworkManager (nmcli) where it is installed; true or
    /// false overrides it.
    public var networkMetered: Bool?
    /// Defer on a metered network (default true).
    public var deferOnMeteredNetwork: Bool?
    /// Backoff after a deferred discretionary run: the first delay (default 600 s), doubling up to
    /// `backoffMaxSeconds` (default 7200 s), with jitter; reset by a sync that completes.
    public var backoffSeconds: Int?
    public var backoffMaxSeconds: Int?
    /// Cut the discretionary rate when request latency rises above its baseline (default true).
    public var yieldToOtherTraffic: Bool?

    public init(remotes: [String], channel: String) {
        self.remotes = remotes
        self.channel = channel
    }

    /// The bundles of `manifest` this install holds.
    func selection(of manifest: Manifest) -> BundleSelection {
        BundleSelection(manifest, chosen: bundles, excluded: excludedBundles ?? [])
    }

    /// The bundles of the build `summary` describes that this install holds.
    func selection(of summary: BuildSummary) -> BundleSelection {
        summary.selection(chosen: bundles, excluded: excludedBundles ?? [])
    }

    var connections: Int { max(1, min(maxConnections ?? 6, 64)) }
    var requestBytes: Int64 { Int64(max(64 << 10, maxRequestBytes ?? (16 << 20))) }
    var gapBytes: Int64 { Int64(max(0, coalesceGapBytes ?? 0)) }
    var buildsKept: Int { max(1, keepBuilds ?? 2) }
    var refreshDeadline: TimeInterval { TimeInterval(max(1, refreshDeadlineSeconds ?? 120)) }
    var discretionaryRate: Int { max(16 << 10, discretionaryMaxBytesPerSecond ?? (8 << 20)) }
    var backoff: Backoff {
        Backoff(
            base: TimeInterval(max(1, backoffSeconds ?? 600)),
            cap: TimeInterval(max(1, backoffMaxSeconds ?? 7200)))
    }
}

extension Origin {
    /// The origin an install's configuration names, with its retry policy.
    convenience init(_ config: InstallConfig, client: HTTPClient) throws(PatchSyncError) {
        try self.init(
            mirrors: config.remotes, client: client,
            failureStreak: config.failureStreak ?? max(MirrorGroup.defaultFailureStreak, config.connections + 2))
    }
}

extension HTTPClient.Settings {
    /// The transfer settings an install's configuration asks for; `yielding` (discretionary syncs)
    /// lets request latency lower the rate below the cap.
    init(_ config: InstallConfig, yielding: Bool = false) {
        self.init()
        maxConnections = config.connections
        maxConnectionsPerHost = config.connections
        caFile = config.caFile
        lowSpeedBytes = max(1, config.lowSpeedBytesPerSecond ?? lowSpeedBytes)
        lowSpeedSeconds = max(1, config.lowSpeedSeconds ?? lowSpeedSeconds)
        requestTimeoutSeconds = config.requestTimeoutSeconds.map { max(1, $0) }
        if let cap = config.maxBytesPerSecond, cap > 0 {
            maxBytesPerSecond = cap
            yieldToOtherTraffic = yielding
            // Each connection gets its share of the cap; the slow-retrieval cut-off must stay below it.
            lowSpeedBytes = min(lowSpeedBytes, max(1, cap / (4 * maxConnections)))
        }
    }
}
