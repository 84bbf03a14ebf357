import Foundation
import PatchSync
import Synchronization

/// A transfer rate and an ETA that is never absurd, from samples whose time is given (so tests drive it
/// without a clock): the bytes counted over the last few seconds of the step (a sliding window, so one
/// burst moves it only part way and it never shows more than arrived in the window), and no ETA while the
/// rate is under 1 KiB/s or the ETA would exceed a week.
struct RateEstimator {
    static let window = 3.0
    static let minimumRate = 1024.0
    static let longestETA: Int64 = 7 * 86400

    /// A rate over less than this is not measured: the last event of a step comes at once.
    static let shortestSample = 0.25

    private(set) var bytesPerSecond = 0.0
    /// The samples of the window, oldest first: the first event of a step, or of a resumed sync, starts
    /// the measure (bytes counted before it did not arrive at this rate).
    private var samples: [(seconds: Double, done: Int64)] = []

    mutating func add(seconds: Double, done: Int64) {
        if let last = samples.last, done < last.done {
            // A count that starts again: measure from here, from nothing.
            samples = []
            bytesPerSecond = 0
        }
        if let last = samples.last, seconds < last.seconds { return }  // an event counted before the last one
        // No event for a whole window (events come at least every second while a step runs): the process
        // was frozen or the machine slept, and what arrives now is no rate over that time: measure again.
        if let last = samples.last, seconds - last.seconds >= Self.window { samples = [] }
        samples.append((seconds, done))
        while samples.count > 2, seconds - samples[1].seconds >= Self.window { samples.removeFirst() }
        // Until the step has a measure of its own, the rate of the one before stands.
        guard let first = samples.first, seconds - first.seconds >= Self.shortestSample else { return }
        bytesPerSecond = Double(done - first.done) / (seconds - first.seconds)
    }

    /// A new step: the time between steps (comparing, linking) is not download time, so the measure
    /// starts again at its first event.
    mutating func restart() { samples = [] }

    /// No byte came for a while: the rate is zero until bytes come again.
    mutating func stalled() {
        bytesPerSecond = 0
        samples = []
    }

    func eta(remaining: Int64) -> Int64? {
        guard bytesPerSecond >= Self.minimumRate else { return nil }
        let seconds = Int64((Double(remaining) / bytesPerSecond).rounded(.up))
        return seconds <= Self.longestETA ? seconds : nil
    }
}

/// One progress event of `sync --json`, a line each (schema: manifests/events.schema.json).
struct ProgressEvent: Encodable {
    var event: String
    var message: String
    var bytesDone: Int64?
    var bytesTotal: Int64?
    var bytesPerSecond: Int64?
    var etaSeconds: Int64?
    var filesDone: Int?
    var filesTotal: Int?
    /// With event "bundles": where the build's bundles stand.
    var bundles: BundleProgress?
    /// With event "preload": how much of a preload build is here, and when it unlocks.
    var preload: PreloadStatus?
    /// With event "stalled": how long requests have waited with no byte arriving.
    var stalledSeconds: Int?
    /// With event "transfer" of a sync: bytesDone and bytesTotal are the whole update's; these are the
    /// step's (one more bundle each), and the bundles it downloads with their bytes and installed size.
    var stepBytesDone: Int64?
    var stepBytesTotal: Int64?
    var downloading: [String]?
    var bundleBytesDone: Int64?
    var bundleBytesTotal: Int64?
    var bundleInstalledBytes: Int64?
    var peerBytes: Int64?
    /// With event "retrying": the mirror of the next try, the attempt that failed, and when the next comes.
    var mirror: String?
    var attempt: Int?
    var retryInSeconds: Int?
}

/// Shows a sync's progress: one live line on a terminal, plain lines every few seconds otherwise,
/// JSON events with --json, nothing with --quiet.
///
/// Thread-safety: events arrive from the sync's tasks; a `Mutex` holds what the reporter remembers
/// and serialises the output.
final class ProgressReporter: Sendable {
    enum Mode: Sendable {
        case live, lines, json, quiet

        static func choose(json: Bool, quiet: Bool) -> Mode {
            if quiet { return .quiet }
            if json { return .json }
            return isatty(STDERR_FILENO) == 1 ? .live : .lines
        }
    }

    /// What the reporter remembers between events.
    private struct State {
        var estimator = RateEstimator()
        /// The step the last transfer event came from (its own total and bundles).
        var step: (total: Int64, bundles: [String]?)?
        var lastLine = -1.0
        var liveLineShown = false
        /// A stall was told to a person (its later heartbeats are not, until bytes come again).
        var stallTold = false
    }

    private let mode: Mode
    /// What the transfer does, first word of its line ("fetching", "uploading").
    private let verb: String
    private let start = ContinuousClock.now
    private let state = Mutex(State())

    init(mode: Mode, verb: String = "fetching") {
        self.mode = mode
        self.verb = verb
    }

    /// Shows `event` as it happened at `time` (an attached sync's snapshot), not now.
    func handle(_ event: SyncEvent, at time: Date?) {
        Output.at(time) { handle(event) }
    }

    func handle(_ event: SyncEvent) {
        state.withLock { state in
            switch event {
            case .phase(let id, let message):
                Output.enter(id.rawValue)
                phase(message, &state)
            case .transfer(let status):
                state.stallTold = false
                transfer(status, &state)
            case .bundles(let progress): bundles(progress, &state)
            case .stalled(let seconds):
                state.estimator.stalled()
                let message = "no byte from the origin for \(seconds) s: the network or the origin stopped; retrying"
                switch mode {
                case .quiet: break
                case .json:
                    var event = ProgressEvent(event: "stalled", message: message)
                    event.stalledSeconds = seconds
                    event.bytesPerSecond = 0
                    Output.line(Output.stamped(event))
                case .live, .lines:
                    if !state.stallTold { phase(message, &state) }
                }
                state.stallTold = true
            case .offline(let failures):
                notice("offline", "no mirror can be reached (\(failures)); trying again every few seconds", &state)
            case .online:
                notice("online", "the origin answers again", &state)
            case .warning(let text):
                // Said on stderr whatever the mode: it costs money or time, and is fixed by the publisher.
                FileHandle.standardError.write(Data("warning: \(text)\n".utf8))
                if mode == .json { Output.line(Output.stamped(ProgressEvent(event: "warning", message: text))) }
            case .retrying(let retry):
                let message =
                    "\(retry.what) failed on \(retry.failedMirror) (\(retry.failure)); "
                    + "try \(retry.attempt + 1) on \(retry.mirror)"
                    + (retry.retryInSeconds > 0 ? " in \(retry.retryInSeconds) s" : "")
                switch mode {
                case .quiet: break
                case .json:
                    var event = ProgressEvent(event: "retrying", message: message)
                    (event.mirror, event.attempt, event.retryInSeconds) = (
                        retry.mirror, retry.attempt, retry.retryInSeconds
                    )
                    Output.line(Output.stamped(event))
                case .live, .lines: phase(message, &state)
                }
            case .preload(let status):
                switch mode {
                case .quiet: break
                case .json:
                    var event = ProgressEvent(event: "preload", message: status.summary)
                    event.preload = status
                    Output.line(Output.stamped(event))
                case .live, .lines: phase(status.summary, &state)
                }
            }
        }
    }

    /// Ends a live line.
    func finish() {
        state.withLock { state in
            if state.liveLineShown {
                write("\n")
                state.liveLineShown = false
            }
        }
    }

    /// An event with nothing but its message (`offline`, `online`).
    private func notice(_ name: String, _ message: String, _ state: inout State) {
        switch mode {
        case .quiet: return
        case .json: Output.line(Output.stamped(ProgressEvent(event: name, message: message)))
        case .live, .lines: phase(message, &state)
        }
    }

    /// Which bundles are playable, ready and still coming.
    private func bundles(_ progress: BundleProgress, _ state: inout State) {
        let message = Self.describe(progress)
        switch mode {
        case .quiet: return
        case .json:
            var event = ProgressEvent(event: "bundles", message: message)
            event.bundles = progress
            Output.line(Output.stamped(event))
        case .live, .lines: phase(message, &state)
        }
    }

    /// "build 1.2 is playable (base ready); coming: voices-fr"
    static func describe(_ p: BundleProgress) -> String {
        let done = p.bundles.filter { $0.state == .live || $0.state == .ready }.map(\.name)
        let coming = p.names(.pending)
        var text = "build \(p.buildId) " + (p.playable ? "is playable" : "is not playable yet")
        if !done.isEmpty { text += " (\(done.joined(separator: ", ")) staged or live)" }
        if !coming.isEmpty { text += "; still coming: " + coming.joined(separator: ", ") }
        if !p.dropped.isEmpty { text += "; not in this build: " + p.dropped.joined(separator: ", ") }
        return text
    }

    private func phase(_ message: String, _ state: inout State) {
        switch mode {
        case .quiet: return
        case .json: Output.line(Output.stamped(ProgressEvent(event: "phase", message: message)))
        case .live:
            if state.liveLineShown {
                write("\n")
                state.liveLineShown = false
            }
            write(message + "\n")
        case .lines: write(message + "\n")
        }
    }

    private func transfer(_ status: TransferStatus, _ state: inout State) {
        // The whole update's scale when the sync gives it: one bar from the first byte to the last.
        let (done, total) = (status.updateDone ?? status.done, status.updateTotal ?? status.total)
        let (files, filesTotal) = (status.filesDone, status.filesTotal)
        let elapsed = (status.countedAt ?? .now) - start
        let seconds = elapsed.inSeconds
        if let step = state.step, step.total != status.total || step.bundles != status.bundles {
            state.estimator.restart()
        }
        state.step = (status.total, status.bundles)
        state.estimator.add(seconds: seconds, done: done)
        let eta = state.estimator.eta(remaining: total - done)
        let rate = state.estimator.bytesPerSecond
        var text =
            Self.describe(done: done, total: total, rate: rate, eta: eta, verb: verb)
            + (filesTotal > 0 ? ", \(files)/\(filesTotal) files" : "")
        if let bundles = status.bundles, !bundles.isEmpty, let bundleDone = status.bundleDone,
            let bundleTotal = status.bundleTotal
        {
            text +=
                " (\(bundles.joined(separator: ", ")): \(ByteCount.format(bundleDone)) of \(ByteCount.format(bundleTotal)))"
        }
        if let peers = status.peerBytes, peers > 0 { text += ", \(ByteCount.format(peers)) from LAN peers" }
        switch mode {
        case .quiet: return
        case .json:
            var event = ProgressEvent(
                event: "transfer", message: text, bytesDone: done, bytesTotal: total,
                bytesPerSecond: Int64(rate), etaSeconds: eta,
                filesDone: files, filesTotal: filesTotal)
            if status.updateTotal != nil {
                (event.stepBytesDone, event.stepBytesTotal) = (status.done, status.total)
                (event.downloading, event.bundleBytesDone, event.bundleBytesTotal) = (
                    status.bundles, status.bundleDone, status.bundleTotal
                )
                event.bundleInstalledBytes = status.bundleInstalledBytes
            }
            event.peerBytes = status.peerBytes
            Output.line(Output.stamped(event))
        case .live:
            write("\r\u{1B}[2K" + text)
            state.liveLineShown = true
        case .lines:
            guard done >= total || seconds - state.lastLine >= 2 else { return }
            state.lastLine = seconds
            write(text + "\n")
        }
    }

    static func describe(done: Int64, total: Int64, rate: Double, eta: Int64?, verb: String = "fetching") -> String {
        let percent = total > 0 ? done * 100 / total : 100
        let etaText = eta.map { String(format: ", ETA %d:%02d", $0 / 60, $0 % 60) } ?? ""
        // No rate before a quarter second of bytes has been measured (a transfer done at once).
        let rateText = rate > 0 ? " at \(ByteCount.format(Int64(rate)))/s" : ""
        return "\(verb) \(ByteCount.format(done)) of \(ByteCount.format(total)) (\(percent)%)\(rateText)\(etaText)"
    }

    private func write(_ text: String) { FileHandle.standardError.write(Data(text.utf8)) }
}
