import Foundation
import Synchronization

/// A sync's events as another process reads them: `.patchsync/sync-events.jsonl`, emptied when a sync
/// starts, one JSON line per event, then one line with its report or its error. `sync --attach` and
/// ``Install/attach()`` follow it.
enum SyncEventLog {
    /// One line of the log.
    struct Line: Codable {
        var pid: Int32
        /// When the event happened (seconds since 1970): a follower that attaches late shows it at that time.
        var time: Double?
        var phase: SyncPhase?
        var message: String?
        var transfer: TransferStatus?
        var bundles: BundleProgress?
        var preload: PreloadStatus?
        var stalledSeconds: Int?
        var retry: RetryStatus?
        var warning: String?
        var offline: String?
        var online: Bool?
        var report: SyncReport?
        var error: ErrorRecord?

        init(pid: Int32) { self.pid = pid }

        init(_ event: SyncEvent, pid: Int32) {
            self.pid = pid
            switch event {
            case .phase(let id, let text): (phase, message) = (id, text)
            case .transfer(let status): transfer = status
            case .bundles(let progress): bundles = progress
            case .preload(let status): preload = status
            case .stalled(let seconds): stalledSeconds = seconds
            case .retrying(let status): retry = status
            case .warning(let text): warning = text
            case .offline(let text): offline = text
            case .online: online = true
            }
        }

        /// What a newer line of the same kind replaces in a snapshot (nil: every one is kept).
        var kind: String? {
            if phase != nil { return "phase" }
            if transfer != nil { return "transfer" }
            if bundles != nil { return "bundles" }
            if preload != nil { return "preload" }
            if stalledSeconds != nil { return "stalled" }
            if retry != nil { return "retry" }
            if offline != nil || online != nil { return "network" }
            return nil
        }

        var event: SyncEvent? {
            if let phase { return .phase(phase, message ?? "") }
            if let transfer { return .transfer(transfer) }
            if let bundles { return .bundles(bundles) }
            if let preload { return .preload(preload) }
            if let stalledSeconds { return .stalled(seconds: stalledSeconds) }
            if let retry { return .retrying(retry) }
            if let warning { return .warning(warning) }
            if let offline { return .offline(offline) }
            if online == true { return .online }
            return nil
        }
    }

    /// A ``PatchSyncError`` as the log keeps it.
    struct ErrorRecord: Codable {
        var code: String
        var message: String
        var remedy: String?
        var reason: PatchSyncError.Reason?
        var requiredBytes: Int64?
        var availableBytes: Int64?

        init(_ error: PatchSyncError) {
            (code, message, remedy, reason) = (error.code.rawValue, error.message, error.remedy, error.reason)
            (requiredBytes, availableBytes) = (error.requiredBytes, error.availableBytes)
        }

        var error: PatchSyncError {
            var error = PatchSyncError(
                PatchSyncError.Code(rawValue: code) ?? .internal, message, remedy: remedy, reason: reason)
            (error.requiredBytes, error.availableBytes) = (requiredBytes, availableBytes)
            return error
        }
    }

    /// Where the run before the current one left its lines.
    static func previous(_ path: String) -> String { path + ".previous" }

    /// Appends a running sync's lines (best effort: a log that cannot be written never fails the sync).
    ///
    /// Thread-safety: a `Mutex` holds the descriptor and serialises the lines; events come from any thread.
    final class Writer: Sendable {
        private let file: Mutex<Int32>

        /// A new file renamed over the last run's: a follower of that run keeps reading its own file to its
        /// end, and one that opens the path only now finds that run's file as ``previous(_:)``.
        init(_ path: String) {
            // Fixed names (the writer holds the staging lock): what a killed run left is replaced, not kept.
            let (temporary, keeping) = (path + ".new", SyncEventLog.previous(path) + ".new")
            unlink(temporary)
            unlink(keeping)
            let fd = open(temporary, O_WRONLY | O_CREAT | O_EXCL | O_APPEND | O_CLOEXEC | O_NOFOLLOW, 0o600)
            if link(path, keeping) == 0 { _ = rename(keeping, SyncEventLog.previous(path)) }
            if fd >= 0, rename(temporary, path) != 0 {
                close(fd)
                unlink(temporary)
                file = Mutex(-1)
                return
            }
            file = Mutex(fd)
        }

        deinit { file.withLock { if $0 >= 0 { close($0) } } }

        func write(_ event: SyncEvent) { append(Line(event, pid: getpid())) }

        /// The sync's end: its report or its error.
        func end(_ result: Result<SyncReport, PatchSyncError>) {
            var line = Line(pid: getpid())
            switch result {
            case .success(let report): line.report = report
            case .failure(let error): line.error = ErrorRecord(error)
            }
            append(line)
        }

        private func append(_ line: Line) {
            var line = line
            line.time = Date().timeIntervalSince1970
            guard var data = try? JSONEncoder.iso.encode(line) else { return }
            data.append(0x0a)
            file.withLock { fd in
                guard fd >= 0 else { return }
                _ = data.withUnsafeBytes { Foundation.write(fd, $0.baseAddress, $0.count) }
            }
        }
    }
}

extension Install {
    /// Follows the sync running on this install in another process (or task): its events from its
    /// start, then its result. Nil when no sync runs.
    ///
    /// ```swift
    /// if let running = try install.attach() {
    ///     for await event in running.events { show(event) }
    ///     let report = try await running.result()
    /// }
    /// ```
    public func attach() throws(PatchSyncError) -> SyncSession? {
        guard let running = RunningSync.alive(try state(readOnly: true).read().running) else { return nil }
        let (path, process) = (layout.eventLogFile, ProcessIdentity(pid: running.pid, startTicks: running.processStart))
        return SyncSession { emit throws(PatchSyncError) -> SyncReport in
            try await Self.follow(path, process: process, emit: emit)
        }
    }

    /// The lines a follower reads when it attaches, as a snapshot: the latest of each kind (phase,
    /// transfer, bundles, …) and every warning, in the order they came, not the whole history replayed.
    static func snapshot(_ lines: [SyncEventLog.Line]) -> [SyncEventLog.Line] {
        var latest: [String: Int] = [:]
        for (index, line) in lines.enumerated() { if let kind = line.kind { latest[kind] = index } }
        return lines.enumerated().filter { index, line in line.kind.map { latest[$0] == index } ?? true }.map(\.1)
    }

    /// The events of the running sync, as they come (an empty sequence when none runs).
    public func events() -> AsyncStream<SyncEvent> {
        (try? attach())?.events ?? AsyncStream { $0.finish() }
    }

    /// Reads `path` as it grows until the sync of `pid` writes its result, or its process is gone.
    static func follow(
        _ path: String, process: ProcessIdentity, emit: @Sendable (SyncEvent, Date?) -> Void
    ) async throws(PatchSyncError) -> SyncReport {
        var reader = Follower(path: path, pid: process.pid)
        defer { try? reader.opened?.close() }
        var sawEnd = false
        while true {
            // Detaching is no pause: the sync goes on in its own process.
            if Task.isCancelled {
                throw PatchSyncError(.deferred, "stopped following the sync; it goes on", reason: .otherSync)
            }
            let alive = process.isRunning
            if let report = try reader.drain(emit) { return report }
            if reader.history != nil { reader.caughtUp(emit) }
            if !alive {
                // One more read after the process ended: its last lines were written before it exited. A
                // later run's file, still empty, may have taken the path as this one ended: its end is in
                // the one before, shown as a snapshot too.
                if sawEnd, reader.lookBack(reading: false) {
                    if reader.history == nil { reader.history = [] }
                    continue
                }
                if sawEnd {
                    throw PatchSyncError(
                        .deferred, "the sync (process \(reader.pid)) ended without a result: it was killed",
                        remedy: "start the download again; it goes on where it stopped", reason: .stopped)
                }
                sawEnd = true
                continue
            }
            try? await Task.sleep(for: .milliseconds(100))
        }
    }

    /// What a follower has read of one run's log: the file of the run, opened once (a later run writes a
    /// new file in its place, never into this one), the bytes of a line not complete yet, and what the log
    /// held when the follower attached, shown as a snapshot at its own times.
    private struct Follower {
        let path: String
        let pid: Int32
        var opened: FileHandle?
        var pending = Data()
        var history: [SyncEventLog.Line]? = []
        /// Whether a line of `pid` was read: the path may already hold a later run's file (one that took
        /// over as this was attached), and the lines of `pid` are then in the file before it.
        var ours = false
        var lookedBack = false

        init(path: String, pid: Int32) {
            self.path = path
            self.pid = pid
        }

        func show(_ line: SyncEventLog.Line, _ emit: (SyncEvent, Date?) -> Void) {
            if let event = line.event { emit(event, line.time.map { Date(timeIntervalSince1970: $0) }) }
        }

        mutating func caughtUp(_ emit: (SyncEvent, Date?) -> Void) {
            for line in Install.snapshot(history ?? []) { show(line, emit) }
            history = nil
        }

        /// Reads on in the file before this one, once, when no line of `pid` was read; `reading`: from
        /// its start now.
        mutating func lookBack(reading: Bool) -> Bool {
            guard !ours, !lookedBack, let earlier = FileHandle(forReadingAtPath: SyncEventLog.previous(path)) else {
                return false
            }
            lookedBack = true
            try? opened?.close()
            opened = earlier
            pending = reading ? ((try? earlier.readToEnd()) ?? Data()) : Data()
            return true
        }

        /// Shows the complete lines of `pid` the file holds now; the run's report once it ended, its
        /// error thrown once it failed.
        mutating func drain(_ emit: (SyncEvent, Date?) -> Void) throws(PatchSyncError) -> SyncReport? {
            if opened == nil { opened = FileHandle(forReadingAtPath: path) }
            if let handle = opened { pending.append((try? handle.readToEnd()) ?? Data()) }
            while let newline = pending.firstIndex(of: 0x0a) {
                let bytes = pending[pending.startIndex..<newline]
                pending.removeSubrange(pending.startIndex...newline)
                guard let line = try? JSONDecoder.isoDates.decode(SyncEventLog.Line.self, from: Data(bytes)) else {
                    continue
                }
                guard line.pid == pid else {
                    _ = lookBack(reading: true)
                    continue
                }
                ours = true
                if line.report != nil || line.error != nil { caughtUp(emit) }
                if let report = line.report { return report }
                if let error = line.error { throw error.error }
                if history != nil { history?.append(line) } else { show(line, emit) }
            }
            return nil
        }
    }
}

extension JSONDecoder {
    /// Dates as ISO 8601 text.
    static var isoDates: JSONDecoder {
        let decoder = JSONDecoder()
        decoder.dateDecodingStrategy = .iso8601
        return decoder
    }
}
