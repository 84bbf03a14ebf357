import ArgumentParser
import Foundation
import PatchSync

struct Sync: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Check, download and stage the newest build; never touches the live tree.",
        discussion: """
            Verifies the signed metadata, downloads only the chunks the install lacks, \
            verifies each, and stages a complete build that `apply` swaps in. \
            Re-running after an interruption fetches only what is not yet done. \
            SIGTERM or SIGINT stop it cleanly: the chunk writes in flight finish, progress is kept, \
            and it exits 75.

            --discretionary is for schedulers (systemd timers, cron): idle CPU and I/O priority, \
            a bandwidth cap (config discretionaryMaxBytesPerSecond, default 8M) that yields to other \
            traffic, and exit 75 at once, without network traffic, while the game runs, on battery, \
            inside playHours, on a metered network or while backing off after such a deferral; \
            conditions are watched while it runs too.

            A network blink does not end a sync: while no mirror can be reached (connections \
            refused, a Wi-Fi handover, a resume from suspend) it tries again every few seconds, \
            with `offline` and `online` events, and exits 69 only when no byte has arrived for \
            --give-up (default 2m).

            A sync started while a --discretionary one runs takes over: it asks that one to stop, waits \
            until its progress is recorded, and goes on at full speed. --attach follows a running sync's \
            progress from another process.

            --peer asks another install of the game on the network (`patchsync share` there) for \
            chunks before the origin; shares of this game that DNS-SD finds (Avahi) are asked too. \
            Every chunk is checked against the signed manifest, a peer that sends a wrong one is dropped \
            for the rest of the sync, and what a peer lacks comes from the origin. --share serves this \
            install's chunks to others while the sync runs and, with --for or --deadline, until then.

            Examples:
              patchsync sync --install ~/Games/forest --json
              patchsync sync --install ~/Games/forest --attach --json
              patchsync sync --install ~/Games/forest --max-rate 2M
              patchsync sync --install ~/Games/forest --discretionary --deadline 06:00
              patchsync sync --install ~/Games/forest --peer http://192.168.1.20:27472
            """)

    @OptionGroup var options: ClientOptions
    @Flag(help: "Print no progress, only the result.") var quiet = false
    @Option(
        help: ArgumentHelp(
            "One bandwidth cap for all downloads together, bytes per second (suffix K, M or G: "
                + "binary multiples); overrides the config's maxBytesPerSecond.", valueName: "rate"),
        transform: ByteCount.parseRate)
    var maxRate: Int?
    @Flag(help: "Run as a background agent that players never notice (see above).") var discretionary = false
    @Option(
        help: ArgumentHelp(
            "Stop at this local time (the next one to come), progress kept; exit 75.",
            valueName: "HH:MM"))
    var deadline: String?
    @Option(
        name: .customLong("for"),
        help: ArgumentHelp(
            "Stop after this long (90s, 30m, 2h), progress kept; exit 75.",
            valueName: "duration"))
    var duration: String?
    @Option(
        help: ArgumentHelp(
            "Stop with exit 69 when no byte has arrived for this long since the last one (30s, 2m; default 2m), progress kept; a `stalled` event comes after 10 s.",
            valueName: "duration"))
    var giveUp: String?
    @Flag(
        help: ArgumentHelp(
            "Follow the sync already running on this install (its events from its start, then its result and exit status) instead of starting one."
        ))
    var attach = false
    @Option(
        help: ArgumentHelp(
            "A LAN share to ask for chunks before the origin (repeatable; also config peers).", valueName: "url"))
    var peer: [String] = []
    @Flag(help: "Serve this install's chunks to LAN peers while this command runs (see `patchsync share`).")
    var share = false
    @OptionGroup var shareOptions: ShareOptions

    func run() async throws {
        let output = Output(json: options.json)
        if attach { return try await follow(output) }
        var syncer = Syncer(install: try options.openInstall())
        syncer.maxBytesPerSecond = maxRate
        syncer.discretionary = discretionary
        syncer.deadline = try stopTime(now: syncer.environment.now(), zone: syncer.environment.timeZone)
        if let giveUp {
            let seconds = min(try parseDuration(giveUp), 365 * 86400)
            syncer.giveUpAfter = .milliseconds(Int64(seconds * 1000))
            // a stall is told before it ends the sync
            syncer.stallAfter = min(syncer.stallAfter, .milliseconds(Int64(seconds * 500)))
        }
        syncer.peers = try peer.map { url throws(PatchSyncError) in
            guard url.lowercased().hasPrefix("http://") || url.lowercased().hasPrefix("https://") else {
                throw PatchSyncError(
                    .usage, "--peer \(url) is not an http URL", remedy: "give it as http://ADDRESS:PORT")
            }
            return url
        }
        let stop = SyncStop()
        syncer.stop = stop
        let signals = SignalStop(stop)
        defer { withExtendedLifetime(signals) {} }
        // A share that cannot start (no private network) never stops the sync.
        var sharing: (ShareServer, Process?)?
        if share {
            do { sharing = try shareOptions.start(syncer.install) } catch {
                FileHandle.standardError.write(Data("not sharing: \(error.message)\n".utf8))
            }
        }
        defer {
            sharing?.1?.terminate()
            sharing?.0.stop()
        }
        let progress = ProgressReporter(mode: .choose(json: options.json, quiet: quiet))
        let report = try await syncer.run { progress.handle($0) }
        progress.finish()
        // Sharing goes on until the run's stop time (--for, --deadline) or a signal.
        if sharing != nil, let end = syncer.deadline {
            while stop.reason == nil, Date() < end { try? await Task.sleep(for: .milliseconds(200)) }
        }
        output.result(report, human: Self.describe(report))
    }

    /// `--attach`: the running sync's events and result, as if this process ran it.
    private func follow(_ output: Output) async throws {
        let install = try options.openInstall()
        guard let session = try install.attach() else {
            struct NotRunning: Encodable { var running = false }
            output.result(NotRunning(), human: "no sync is running on \(install.root)")
            return
        }
        let progress = ProgressReporter(mode: .choose(json: options.json, quiet: quiet))
        // The sync's state when attached (the latest of each kind), at the times it recorded them, then what comes.
        for await timed in session.timedEvents { progress.handle(timed.event, at: timed.time) }
        let report = try await session.result()
        progress.finish()
        output.result(report, human: Self.describe(report))
    }

    /// The earlier of `--deadline` (its next occurrence) and now + `--for`.
    func stopTime(now: Date, zone: TimeZone) throws(PatchSyncError) -> Date? {
        var times: [Date] = []
        if let duration { times.append(now + (try parseDuration(duration))) }
        if let deadline {
            guard let minutes = ClockTime.minutes(deadline) else {
                throw PatchSyncError(
                    .usage, "--deadline '\(deadline)' is not a local time", remedy: "write it as HH:MM, e.g. 06:00")
            }
            times.append(ClockTime.next(minutes: minutes, after: now, in: zone))
        }
        return times.min()
    }

    static func describe(_ r: SyncReport) -> String {
        let why =
            r.rollback.map {
                "the publisher rolled the channel back from \($0.from) to \(r.buildId)"
                    + ($0.reason.map { ": \($0)" } ?? "") + "\n"
            } ?? ""
        return why + describeOutcome(r)
    }

    static func describeOutcome(_ r: SyncReport) -> String {
        switch r.outcome {
        case .upToDate: return "build \(r.buildId) is installed and current; nothing to do"
        case .alreadyReady: return "build \(r.buildId) is staged and ready; run `patchsync apply`"
        case .heldBack: return "build \(r.buildId) was rolled back from; it stays out until a newer build is published"
        case .preloaded:
            return (r.preload?.summary ?? "build \(r.buildId) is preloaded")
                + "\nit unlocks when the publisher releases it: a sync after that opens it (with one small request), "
                + "and the launcher plays it at the next start; the current build stays until then"
        case .ready:
            return """
                build \(r.buildId) is staged and ready (\(ByteCount.format(r.buildBytes))): \
                \(r.filesLinked) files unchanged, \(r.filesAssembled) assembled (\(r.filesPatched) patched by deltas\
                \(r.deltaFallbacks > 0 ? ", \(r.deltaFallbacks) refused deltas fetched as chunks" : "")) from \
                \(r.chunksCopiedLocally) local and \(r.chunksFetched) fetched chunks; \
                downloaded \(ByteCount.format(r.bytesReceived)) in \(r.requests) range requests\
                \(r.bytesFromPeers > 0 ? "; \(ByteCount.format(r.bytesFromPeers)) came from LAN peers" : "")\
                \((r.peers ?? []).compactMap { p in p.dropped.map { "\npeer \(p.url) was dropped: \($0)" } }.joined())
                next: patchsync apply (or let the launcher do it at the next start)
                """
        }
    }
}
