import Foundation
import Synchronization

extension Origin {
    /// Downloads `path` into the file at `local`, resuming from what an earlier run left there, and
    /// checks the whole file against `length` and `sha256`. Returns the bytes fetched by this call. With
    /// `offset`, the file is the `length` bytes of `path` from there. `progress` is called with the bytes
    /// of the file so far (resumed ones included), on the transfer thread, as they arrive.
    ///
    /// Retried as ``withRetries(_:absence:deadline:preferring:onGiveUp:_:)`` decides; the bytes of a
    /// response cut short are kept, and the next attempt asks for the rest. The hash is checked inside
    /// the attempt that completes the file, so a copy that fails it is that mirror's failure
    /// (``TransferFailure/damaged(_:)``): the file starts over from the next mirror, and only when every
    /// mirror served damaged bytes does the download fail (65). A complete file an earlier run left is
    /// checked first, and fetched again when it fails.
    func download(
        _ path: String, to local: String, length: Int64, sha256: SHA256Digest, offset: Int64 = 0,
        progress: @escaping @Sendable (Int64) -> Void = { _ in }
    ) async throws(PatchSyncError) -> Int64 {
        let output = try Self.openForResume(local, length: length)
        var have = (try? output.status().st_size).map(Int64.init) ?? 0
        if have == length {
            if try Self.holds(output, sha256: sha256) { return 0 }
            have = 0
        }
        var fetched: Int64 = 0
        // Who wrote the bytes held (-1: an earlier run). A copy that fails its hash is blamed on a mirror
        // only when that mirror wrote all of it; a copy pieced together starts over instead, unblamed.
        var writers: Set<Int> = have > 0 ? [-1] : []
        var restarted = false
        try await withRetries(path) { (mirror: Int) async throws(PatchSyncError) -> Attempt<Void> in
            let url = self.url(path, mirror: mirror)
            // While yielding to other traffic, in parts of the request budget (as chunk ranges go).
            let end = client.requestBudget.map { min(length, have + Int64($0)) } ?? length
            let sink = FileSink(output) { [have] written in progress(have + written) }
            let request = TransferRequest(url: url, range: (offset + have)...(offset + end - 1), maxBytes: length)
            let outcome = await client.fetch(request, into: sink)
            have += sink.written
            fetched += sink.written
            if sink.written > 0 { writers.insert(mirror) }
            if let error = sink.error { throw error }
            if have == length {
                if try Self.holds(output, sha256: sha256) { return .done(()) }
                have = 0
                defer { writers = [] }
                // Pieced together: once, this mirror alone from the start (then the mirror that finished is blamed,
                // so a connection that keeps cutting never makes this loop).
                if writers != [mirror] && !restarted {
                    restarted = true
                    return .more
                }
                let what = offset == 0 ? url : "bytes \(offset)-\(offset + length - 1) of \(url)"
                return .failed(.damaged("\(what) does not match its signed SHA-256"), progressed: false)
            }
            switch outcome {
            case .failure(let failure): return .failed(failure, progressed: sink.written > 0)
            case .success where have == end: return .more  // the next part
            case .success:
                return .failed(
                    .wrongRange("asked \(end - have + sink.written) bytes, got \(sink.written)"),
                    progressed: sink.written > 0)
            }
        }
        return fetched
    }

    /// Opens (creating) a download's file for appending; a file longer than `length` starts again.
    private static func openForResume(_ local: String, length: Int64) throws(PatchSyncError) -> FileDescriptor {
        do {
            try FileSystem.makeDirectory(FileSystem.parent(of: local))
            let output = try FileDescriptor.ownFile(local, flags: O_WRONLY | O_CREAT | O_APPEND)
            if Int64(try output.status().st_size) > length { try output.truncate(to: 0) }
            return output
        } catch { throw PatchSyncError.wrap(error).during("downloading to \(local)") }
    }

    /// Whether the complete download in `output` has the SHA-256 `sha256`, synced; when it has not, empties
    /// it (appends go to its start again), so that the next attempt fetches it anew.
    private static func holds(_ output: FileDescriptor, sha256: SHA256Digest) throws(PatchSyncError) -> Bool {
        do {
            try output.sync()
            if try SHA256Hasher.hash(file: output.path) == sha256 { return true }
            try output.truncate(to: 0)
            return false
        } catch { throw PatchSyncError.wrap(error).during("checking \(output.path)") }
    }
}

/// A sink that appends a body to a file.
///
/// Thread-safety: a `Mutex` holds the count and the error (uncontended: written on the transfer
/// thread, read after the transfer completed); `output` is written on the transfer thread only.
final class FileSink: ResponseSink, Sendable {
    private struct State {
        var written: Int64 = 0
        var error: PatchSyncError?
    }

    private let output: FileDescriptor
    private let onWrite: @Sendable (Int64) -> Void
    private let state = Mutex(State())

    /// The bytes written so far.
    var written: Int64 { state.withLock { $0.written } }
    /// Why writing failed, if it did.
    var error: PatchSyncError? { state.withLock { $0.error } }

    /// `onWrite` is called with the bytes written so far after each write.
    init(_ output: FileDescriptor, onWrite: @escaping @Sendable (Int64) -> Void = { _ in }) {
        self.output = output
        self.onWrite = onWrite
    }

    func receive(_ bytes: UnsafeRawBufferPointer) -> PatchSyncError? {
        do { try output.write(bytes) } catch {
            let failure = PatchSyncError.wrap(error).during("saving a download")
            state.withLock { $0.error = failure }
            return failure
        }
        let count = Int64(bytes.count)
        let written = state.withLock { state in
            state.written += count
            return state.written
        }
        onWrite(written)
        return nil
    }
}
