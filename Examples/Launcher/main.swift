// A small game launcher on the PatchSync library, to start yours from:
//
// - a download page: one bar for the whole update with rate and time left, which bundle is coming,
//   and whether the game is playable yet;
// - a speed limit setting (saved in the install, applied to a running download at once);
// - pause and resume (SIGUSR1 pauses, SIGUSR2 resumes: a real launcher wires its buttons there);
// - play: the ready build is applied, the game starts in its build folder, and the download of the next
//   build goes on while it runs; when the game exits, the download stops and a later start resumes it;
// - errors in words a player reads.
//
//   swift run launcher-example ~/Games/forest [--limit 2M] ./bin/game --fullscreen
import Foundation
import PatchSync

/// One line for the player, written at once (into a pipe or a log file too, where print would hold it).
func say(_ text: String) { try? FileHandle.standardOutput.write(contentsOf: Data((text + "\n").utf8)) }

var arguments = Array(CommandLine.arguments.dropFirst())
guard arguments.count >= 2 else {
    say("usage: launcher-example INSTALL_DIR [--limit RATE] GAME [ARGS…]")
    exit(64)
}
let folder = arguments.removeFirst()
var limit: Int?
if arguments.first == "--limit", arguments.count >= 2 {
    limit = Launcher.rate(arguments[1])
    arguments.removeFirst(2)
}
let game = arguments.removeFirst()

/// What the launcher shows and does; a real one draws this in its window.
enum Launcher {
    /// "2M" → 2097152 bytes per second; "0" or "off" → no limit.
    static func rate(_ text: String) -> Int? {
        let units: [Character: Double] = ["K": 1024, "M": 1_048_576, "G": 1_073_741_824]
        var number = text.uppercased()
        var unit = 1.0
        if let last = number.last, let u = units[last] {
            unit = u
            number.removeLast()
        }
        guard let value = Double(number), value > 0 else { return nil }
        return Int(value * unit)
    }

    static func size(_ bytes: Int64) -> String { ByteCount.format(bytes) }

    /// The download page's line: "Downloading 12.3 MiB of 40.0 MiB (30%) at 2.1 MiB/s, 0:12 left (hd-textures)".
    static func bar(_ s: TransferStatus, rate: Double) -> String {
        let done = s.updateDone ?? s.done, total = s.updateTotal ?? s.total
        let percent = total > 0 ? done * 100 / total : 100
        var line = "Downloading \(size(done)) of \(size(total)) (\(percent)%)"
        if rate >= 1024 {
            line += " at \(size(Int64(rate)))/s"
            let left = Int(Double(total - done) / rate)
            line += String(format: ", %d:%02d left", left / 60, left % 60)
        }
        if let bundles = s.bundles, !bundles.isEmpty { line += " (\(bundles.joined(separator: ", ")))" }
        return line
    }

    /// An error as a player reads it: the library's advice, written for a person.
    static func explain(_ error: PatchSyncError) -> String { error.advice }
}

/// The download: a session that pause stops and resume starts again (it goes on where it stopped).
final class Download: @unchecked Sendable {
    private let install: Install
    private let state = NSLock()
    private var session: SyncSession?
    private var paused = false
    private var rate = 0.0
    private var last: (at: Date, done: Int64)?

    init(install: Install) { self.install = install }

    func start() {
        state.lock()
        defer { state.unlock() }
        guard session == nil, !paused else { return }
        let session = install.startSync()
        self.session = session
        Task { await self.show(session) }
    }

    func pause() {
        state.lock()
        paused = true
        let running = session
        session = nil
        state.unlock()
        running?.cancel()
        say("Download paused.")
    }

    func resume() {
        state.lock()
        paused = false
        state.unlock()
        say("Download resumed.")
        start()
    }

    /// Stops for good (the game exited): a later start of the launcher resumes it.
    func stop() async {
        let running = state.withLock {
            paused = true
            return session
        }
        running?.cancel()
        _ = try? await running?.result()
    }

    private func show(_ session: SyncSession) async {
        for await event in session.events {
            switch event {
            case .phase(let phase, _) where phase == .checking: say("Checking for updates…")
            case .transfer(let status): say(Launcher.bar(status, rate: measure(status)))
            case .bundles(let progress):
                say(
                    progress.playable
                        ? "Build \(progress.buildId) is playable." : "Build \(progress.buildId) is not playable yet.")
            case .stalled: say("Waiting for the server… (no data for a while; it keeps trying)")
            case .retrying(let retry) where retry.attempt == 1: say("Connection trouble; trying again.")
            case .preload(let status):
                say(
                    "Pre-loading \(status.buildId): \(Launcher.size(status.bytesDone)) of \(Launcher.size(status.bytes))."
                )
            default: break
            }
        }
        do {
            let report = try await session.result()
            if report.outcome == .ready {
                say("Update \(report.buildId) is downloaded; it is installed at the next start.")
            }
        } catch {
            if error.reason != .playerPaused { say(Launcher.explain(error)) }
        }
        // Over: a later start() begins a new one (after a failure, the play loop's "try again").
        state.withLock { if self.session === session { self.session = nil } }
    }

    /// A rate over the update's bytes, smoothed.
    private func measure(_ s: TransferStatus) -> Double {
        let done = s.updateDone ?? s.done, now = Date()
        state.lock()
        defer { state.unlock() }
        if let last, now.timeIntervalSince(last.at) >= 0.25, done >= last.done {
            let instant = Double(done - last.done) / now.timeIntervalSince(last.at)
            rate = rate == 0 ? instant : 0.3 * instant + 0.7 * rate
            self.last = (now, done)
        } else if last == nil || done < last!.done {
            last = (now, done)
        }
        return rate
    }
}

do {
    let install = try Install.open(at: folder)
    if let limit {  // the settings page's "limit download speed"
        try install.updateConfig { $0.maxBytesPerSecond = limit }
        say("Download speed limited to \(Launcher.size(Int64(limit)))/s.")
    }
    let download = Download(install: install)
    signal(SIGUSR1, SIG_IGN)
    signal(SIGUSR2, SIG_IGN)
    let pause = DispatchSource.makeSignalSource(signal: SIGUSR1, queue: .global())
    pause.setEventHandler { download.pause() }
    pause.resume()
    let resume = DispatchSource.makeSignalSource(signal: SIGUSR2, queue: .global())
    resume.setEventHandler { download.resume() }
    resume.resume()

    download.start()
    // Play: a ready build is applied first (never blocked by the download above); with nothing installed
    // yet, wait for the download to make the game playable.
    var started: GameProcess?
    while started == nil {
        do {
            started = try await GameLauncher(install: install).start(game, arguments)
        } catch  where error.reason == .notPlayableYet {
            try? await Task.sleep(for: .seconds(2))
            download.start()  // after a failed download, try again (nothing happens while one runs)
        }
    }
    let running = started!
    if running.apply.skipped != nil { say("Starting the current build; the update is installed at a later start.") }
    if running.apply.report?.applied == true { say("updated to build \(running.buildId)") }
    say("Playing build \(running.buildId).")
    let status = await running.exitStatus
    await download.stop()  // the game is done; a later start picks the download up where it stopped
    exit(status)
} catch let error as PatchSyncError {
    say(Launcher.explain(error))
    exit(1)
} catch {
    say("Something went wrong: \(error)")
    exit(1)
}
