import ArgumentParser
import Foundation
import PatchSync
import Synchronization

struct Init: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Make a folder an install that follows a channel of an origin.",
        discussion: """
            Example:
              patchsync init --install ~/Games/forest --remote https://cdn.example.com/forest \\
                  --remote https://mirror.example.net/forest --root root.json
            """)

    @Option(help: "The install folder (default: the current directory).") var install: String = "."
    @Option(help: "A mirror of the origin (http, https or file URL); repeat for more, tried in order.")
    var remote: [String] = []
    @Option(help: "The root.json shipped with the game: the start of the trust chain.") var root: String
    @Option(help: "The channel to follow.") var channel: String = "live"
    @Option(help: "A PEM file of certificate authorities to trust for https remotes (besides the system's).")
    var caFile: String?
    @Option(name: .customLong("bundle"), help: "An optional bundle to install; repeat for more (default: every optional bundle).")
    var bundles: [String] = []
    @Flag(help: "Install the required bundles only (add optional ones later with `patchsync bundles add`).")
    var requiredOnly = false
    @Flag(help: "Print the result as JSON.") var json = false

    func run() async throws {
        var config = InstallConfig(remotes: remote, channel: channel)
        guard bundles.isEmpty || !requiredOnly else {
            throw PatchSyncError(.usage, "--bundle and --required-only contradict each other",
                                 remedy: "give the optional bundles to install with --bundle, or --required-only for none")
        }
        if requiredOnly || !bundles.isEmpty { config.bundles = Array(Set(bundles)).sorted() }
        config.caFile = caFile.map { URL(fileURLWithPath: $0).standardizedFileURL.path }
        let created = try Install.create(at: install, config: config, trustedRoot: root)
        Output(json: json).result(try created.status(),
                                  human: "\(created.root) follows channel \(channel) of \(remote.joined(separator: ", "))\n"
                                      + "next: patchsync sync --install \(created.root)")
    }
}

struct Sync: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Check, download and stage the newest build; never touches the live tree.",
        discussion: """
            Verifies the signed metadata, downloads only the chunks the install lacks,
            verifies each, and stages a complete build that `apply` swaps in.
            Re-running after an interruption fetches only what is not yet done.
            SIGTERM or SIGINT stop it cleanly: the chunk writes in flight finish, progress is kept,
            and it exits 75.

            --discretionary is for schedulers (systemd timers, cron): idle CPU and I/O priority,
            a bandwidth cap (config discretionaryMaxBytesPerSecond, default 8M) that yields to other
            traffic, and exit 75 at once, without network traffic, while the game runs, on battery,
            inside playHours, on a metered network or while backing off after such a deferral;
            conditions are watched while it runs too.

            Examples:
              patchsync sync --install ~/Games/forest --json
              patchsync sync --install ~/Games/forest --max-rate 2M
              patchsync sync --install ~/Games/forest --discretionary --deadline 06:00
            """)

    @OptionGroup var options: ClientOptions
    @Flag(help: "Print no progress, only the result.") var quiet = false
    @Option(help: ArgumentHelp("One bandwidth cap for all downloads together, bytes per second (suffix K, M or G: "
                               + "binary multiples); overrides the config's maxBytesPerSecond.", valueName: "rate"),
            transform: ByteCount.parseRate)
    var maxRate: Int?
    @Flag(help: "Run as a background agent that players never notice (see above).") var discretionary = false
    @Option(help: ArgumentHelp("Stop at this local time (the next one to come), progress kept; exit 75.",
                               valueName: "HH:MM"))
    var deadline: String?
    @Option(name: .customLong("for"), help: ArgumentHelp("Stop after this long (90s, 30m, 2h), progress kept; exit 75.",
                                                         valueName: "duration"))
    var duration: String?

    func run() async throws {
        let output = Output(json: options.json)
        var syncer = Syncer(install: try Install.open(at: options.install))
        syncer.maxBytesPerSecond = maxRate
        syncer.discretionary = discretionary
        syncer.deadline = try stopTime(now: syncer.environment.now(), zone: syncer.environment.timeZone)
        let stop = SyncStop()
        syncer.stop = stop
        let signals = SignalStop(stop)
        defer { withExtendedLifetime(signals) {} }
        let progress = ProgressReporter(mode: .choose(json: options.json, quiet: quiet))
        let report = try await syncer.run { progress.handle($0) }
        progress.finish()
        output.result(report, human: Self.describe(report))
    }

    /// The earlier of `--deadline` (its next occurrence) and now + `--for`.
    func stopTime(now: Date, zone: TimeZone) throws(PatchSyncError) -> Date? {
        var times: [Date] = []
        if let duration { times.append(now + (try parseDuration(duration))) }
        if let deadline {
            guard let minutes = ClockTime.minutes(deadline) else {
                throw PatchSyncError(.usage, "--deadline '\(deadline)' is not a local time", remedy: "write it as HH:MM, e.g. 06:00")
            }
            times.append(ClockTime.next(minutes: minutes, after: now, in: zone))
        }
        return times.min()
    }

    static func describe(_ r: SyncReport) -> String {
        let why = r.rollback.map { "the publisher rolled the channel back from \($0.from) to \(r.buildId)"
            + ($0.reason.map { ": \($0)" } ?? "") + "\n" } ?? ""
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
                downloaded \(ByteCount.format(r.bytesReceived)) in \(r.requests) range requests
                next: patchsync apply (or let the launcher do it at the next start)
                """
        }
    }
}

struct Apply: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Swap a ready build in, atomically; a no-op when none is ready.",
        discussion: "Refused (exit 75) while the game runs.\n\nExample:\n  patchsync apply --install ~/Games/forest")

    @OptionGroup var options: ClientOptions

    func run() async throws {
        let report = try Install.open(at: options.install).applyPendingUpdate()
        let human = report.applied
            ? "build \(report.current ?? "?") is now current (previous: \(report.previous ?? "none"))"
            : "no build is ready; current is \(report.current ?? "none")"
        Output(json: options.json).result(report, human: human)
    }
}

struct Status: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Show installed, previous, staged and ready builds.",
        discussion: "Example:\n  patchsync status --install ~/Games/forest --json")

    @OptionGroup var options: ClientOptions

    func run() async throws {
        let status = try Install.open(at: options.install).status()
        var lines = ["install:  \(status.install)", "channel:  \(status.channel) from \(status.remotes.joined(separator: ", "))",
                     "current:  \(status.current ?? "none")" + Self.why(status.currentRollback),
                     "previous: \(status.previous ?? "none")", "ready:    \(status.ready ?? "none")" + Self.why(status.readyRollback)]
        if let held = status.heldBack { lines.append("held back: \(held) (rolled back from)") }
        for build in status.builds {
            lines.append("build:    \(build.name): \(ByteCount.format(build.diskBytes)) on disk")
        }
        lines.append("staging:  \(ByteCount.format(status.stagingDiskBytes)) on disk")
        if let s = status.staging {
            lines.append("progress: \(s.buildId): \(s.chunksDone)/\(s.chunksTotal) chunks written "
                         + "(\(ByteCount.format(s.bytesDone)) of \(ByteCount.format(s.bytesTotal)), unchanged files not counted)")
        }
        if let r = status.routes {
            lines.append("files:    \(r.buildId): \(r.linked) unchanged (linked), \(r.delta) patched by delta, "
                         + "\(r.chunks) from chunks")
        }
        if let r = status.running {
            let eta = r.etaSeconds.map { String(format: ", ETA %d:%02d", Int($0) / 60, Int($0) % 60) } ?? ""
            lines.append("syncing:  process \(r.pid): \(ByteCount.format(r.bytesDone)) of \(ByteCount.format(r.bytesTotal)) "
                         + "at \(ByteCount.format(Int64(r.bytesPerSecond)))/s\(eta)")
        }
        if let d = status.deferral {
            lines.append("deferred: \(d.message) (\(d.count) in a row); next discretionary attempt after "
                         + d.nextAttempt.formatted(.iso8601))
        }
        if let links = status.liveLinks, let folders = status.liveEmptyFolders, links + folders > 0 {
            lines.append("live:     \(links) symbolic links, \(folders) empty folders besides the files")
        }
        if let preload = status.preload { lines.append("preload:  " + preload.summary) }
        if let b = status.bundles {
            lines.append("bundles:  " + ProgressReporter.describe(b))
            for entry in b.bundles { lines.append("          " + BundlesCommand.describe(entry)) }
        }
        Output(json: options.json).result(status, human: lines.joined(separator: "\n"))
    }

    /// " (the publisher rolled the channel back from 1.1: reason)" for a build a rollback put back.
    static func why(_ note: RollbackNote?) -> String {
        note.map { " (the publisher rolled the channel back from \($0.from)" + ($0.reason.map { ": \($0)" } ?? "") + ")" } ?? ""
    }
}

struct Rollback: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Make the previous build current again, atomically (one step back).",
        discussion: """
            The build rolled back from is held back: sync does not install it again until a
            newer build is published. Refused (exit 75) while the game runs.

            Example:
              patchsync rollback --install ~/Games/forest
            """)

    @OptionGroup var options: ClientOptions

    func run() async throws {
        let report = try Install.open(at: options.install).rollback()
        Output(json: options.json).result(report, human: "build \(report.current ?? "?") is current again")
    }
}

struct Launch: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Apply a ready build, then run the game while holding running.lock.",
        discussion: """
            The game runs with PATCHSYNC_CONTENT_ROOT set to the install's `current` folder and
            its own arguments; launch returns the game's exit status (128+N when killed by signal N).
            Its working directory is the folder of the build it starts (builds/<build>), and a
            relative command (./bin/game) is a file of that build, whatever folder launch runs in.
            The game always starts: when the ready build cannot be applied now (another PatchSync
            process changes the live build, another instance of the game runs, the apply fails),
            launch says why on stderr (with --json, as an "apply" event line on stdout) and runs
            the current build. A discretionary sync stops when the game starts.
            While the game runs, apply and rollback refuse to swap the tree.

            Example:
              patchsync launch --install ~/Games/forest -- ./bin/game --fullscreen
            """)

    @OptionGroup var options: ClientOptions

    @Argument(parsing: .postTerminator, help: "The game command and its arguments, after --.")
    var command: [String] = []

    func run() async throws {
        throw ExitCode(try Self.launch(install: options.install, command: command, json: options.json))
    }

    static func launch(install folder: String, command: [String], json: Bool = false) throws(PatchSyncError) -> Int32 {
        guard let executable = command.first else {
            throw PatchSyncError(.usage, "no game command given", remedy: "put it after --: patchsync launch -- ./game")
        }
        let install = try Install.open(at: folder)
        return try GameLauncher(install: install).launch(executable, Array(command.dropFirst())) { outcome in
            if json {
                struct Event: Encodable { var event = "apply"; var applied: Bool; var current: String?; var skipped: String? }
                let line = Output.encode(Event(applied: outcome.report?.applied ?? false, current: outcome.report?.current,
                                               skipped: outcome.skipped))
                FileHandle.standardOutput.write(Data((line + "\n").utf8))  // unbuffered: before the game's own output
            } else if let skipped = outcome.skipped {
                FileHandle.standardError.write(Data("patchsync: starting the current build without applying: \(skipped)\n".utf8))
            } else if let report = outcome.report, report.applied {
                FileHandle.standardError.write(Data("applied build \(report.current ?? "?")\n".utf8))
            }
        }
    }

    /// `patchsync launch [--install DIR] -- CMD…` exactly: the launch, without the argument parser.
    /// Any other form (help, --json, mistakes) goes through the parser as usual.
    static func fastPath(_ arguments: [String]) -> (() throws(PatchSyncError) -> Int32)? {
        var rest = arguments.dropFirst()
        guard rest.first == "launch" else { return nil }
        rest = rest.dropFirst()
        var folder = "."
        if rest.first == "--install", rest.count >= 2 {
            folder = rest[rest.index(after: rest.startIndex)]
            rest = rest.dropFirst(2)
        }
        guard rest.first == "--", rest.count >= 2 else { return nil }
        let command = Array(rest.dropFirst())
        return { () throws(PatchSyncError) in try launch(install: folder, command: command) }
    }
}

struct Verify: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Check the live tree against its manifest; with --repair, stage a repaired build.",
        discussion: """
            Fast mode trusts files whose size, mtime and inode match the stat cache and hashes the
            rest; --full hashes everything. Damage (missing, wrong size, wrong hash, wrong mode) is
            reported per file and exits 65. --repair stages a repaired build (good files linked,
            damaged ones rebuilt from local chunks where they verify, fetched otherwise) for the
            next apply; --now applies it at once unless the game runs.

            Example:
              patchsync verify --install ~/Games/forest --repair --now
            """)

    @OptionGroup var options: ClientOptions
    @Flag(help: "Hash every file, whatever the stat cache says.") var full = false
    @Flag(help: "Stage a repaired build of the damaged files.") var repair = false
    @Flag(help: "With --repair: apply the repaired build at once (refused while the game runs).") var now = false

    func run() async throws {
        let output = Output(json: options.json)
        let install = try Install.open(at: options.install)
        var report = try install.verify(full: full)
        if repair && !report.damaged.isEmpty {
            report.repairStaged = try await Syncer(install: install).repair(report) { event in
                if case .phase(let message) = event { output.event(ProgressEvent(event: "phase", message: message)) }
            }
            if now { report.applied = try install.applyPendingUpdate().applied }
        }
        output.result(report, human: Self.describe(report))
        if !report.damaged.isEmpty && report.repairStaged == nil { throw ExitCode(ExitStatus.refusedData) }
    }

    static func describe(_ r: VerifyReport) -> String {
        var lines = ["checked \(r.filesChecked) files of build \(r.deployment) (\(r.filesHashed) hashed): "
                     + (r.damaged.isEmpty ? "all intact" : "\(r.damaged.count) damaged")]
        for d in r.damaged {
            lines.append("  \(d.problem.rawValue): \(d.path) (expected \(d.expected)\(d.actual.map { ", found \($0)" } ?? ""))")
        }
        if let staged = r.repairStaged {
            lines.append(r.applied ? "repaired build \(staged) is now current"
                         : "repaired build \(staged) is staged; it goes live at the next apply or launch")
        } else if !r.damaged.isEmpty {
            lines.append("next: patchsync verify --repair (add --now to apply at once)")
        }
        return lines.joined(separator: "\n")
    }
}

/// SIGTERM and SIGINT stop a sync cleanly instead of killing it: the chunk writes in flight
/// finish and are recorded, and the sync exits 75. A second signal kills at once.
///
/// Thread-safety: a `Mutex` holds the sources, so that SignalStop is Sendable whether or not a
/// dispatch source is; they are set once in init and only cancelled in deinit.
final class SignalStop: Sendable {
    private let sources: Mutex<[any DispatchSourceSignal]>

    init(_ stop: SyncStop) {
        sources = Mutex([SIGTERM, SIGINT].map { number in
            signal(number, SIG_IGN)
            let source = DispatchSource.makeSignalSource(signal: number, queue: .global())
            source.setEventHandler {
                let name = number == SIGTERM ? "SIGTERM" : "SIGINT"
                if stop.reason != nil { signal(number, SIG_DFL); raise(number) }
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
