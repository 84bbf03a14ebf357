import Foundation
import Logging
import Synchronization

/// The ranges a preload fetched, one file each in `.patchsync/preload/`: `<object>.<offset>.<length>`,
/// present only once its SHA-256 (signed in the plan) was checked; `*.part` while it downloads.
///
/// Thread-safety: the index of present ranges is in a `Mutex`; the requests of one sync add to it.
final class PreloadStore: Sendable {
    let directory: String
    private let index: Mutex<[SHA256Digest: [(offset: Int64, length: Int64)]]>
    /// Fetches under way, by file name: concurrent requests for one object share one download.
    private let inFlight = Mutex<[String: Task<Int64, any Error>]>([:])

    init(directory: String) {
        self.directory = directory
        var index: [SHA256Digest: [(offset: Int64, length: Int64)]] = [:]
        for name in (try? FileSystem.list(directory)) ?? [] {
            guard let range = InstallLayout.preloadRange(named: name) else { continue }
            index[range.object, default: []].append((range.offset, range.length))
        }
        self.index = Mutex(index)
    }

    func path(_ range: PreloadPlan.SealedRange) -> String {
        directory + "/" + Self.name(range)
    }

    /// The name of the file that holds `range` here.
    static func name(_ range: PreloadPlan.SealedRange) -> String {
        InstallLayout.preloadRangeName(object: range.object, offset: range.offset, length: range.length)
    }

    /// The name of the file that keeps the plan whose gzip'd JSON has the SHA-256 `sha`.
    static func planName(_ sha: String) -> String { InstallLayout.preloadPlanName(sha) }

    func has(_ range: PreloadPlan.SealedRange) -> Bool {
        index.withLock {
            $0[range.object]?.contains { $0.offset == range.offset && $0.length == range.length } ?? false
        }
    }

    /// Fetches `range` (resuming a part left by an earlier run) and checks it; returns the bytes fetched.
    @discardableResult
    func fetch(
        _ range: PreloadPlan.SealedRange, origin: Origin,
        progress: @escaping @Sendable (Int64) -> Void = { _ in }
    ) async throws(PatchSyncError) -> Int64 {
        if has(range) { return 0 }
        let final = path(range)
        let fetched = try await origin.download(
            OriginLayout.object(range.object), to: InstallLayout.partial(final), length: range.length,
            sha256: range.sha256, offset: range.offset, progress: progress)
        do {
            try FileSystem.rename(InstallLayout.partial(final), final)
            try FileSystem.syncDirectory(directory)
        } catch { throw PatchSyncError.wrap(error).during("keeping a preloaded range") }
        index.withLock { $0[range.object, default: []].append((range.offset, range.length)) }
        return fetched
    }

    /// ``fetch(_:origin:progress:)`` shared by concurrent callers: one download per range at a time.
    func fetchShared(_ range: PreloadPlan.SealedRange, origin: Origin) async throws(PatchSyncError) {
        let name = path(range)
        let task = inFlight.withLock { tasks in
            if let running = tasks[name] { return running }
            let task = Task<Int64, any Error> { try await self.fetch(range, origin: origin) }
            tasks[name] = task
            return task
        }
        defer { _ = inFlight.withLock { $0.removeValue(forKey: name) } }
        do { _ = try await task.value } catch { throw PatchSyncError.wrap(error) }
    }

    /// The bytes `offset..<offset+length` of `object` as stored, from a range here that holds them; nil
    /// when none does.
    func read(object: SHA256Digest, offset: Int64, length: Int64) throws(PatchSyncError) -> [UInt8]? {
        guard
            let held = index.withLock({
                $0[object]?.first { $0.offset <= offset && offset + length <= $0.offset + $0.length }
            })
        else { return nil }
        var bytes = [UInt8](repeating: 0, count: Int(length))
        let file =
            directory + "/" + InstallLayout.preloadRangeName(object: object, offset: held.offset, length: held.length)
        let failure: Errno? = bytes.withUnsafeMutableBytes { raw in
            do throws(Errno) {
                try FileDescriptor(path: file, flags: O_RDONLY).read(into: raw, at: offset - held.offset)
            } catch { return error }
            return nil
        }
        if let failure { throw PatchSyncError.wrap(failure).during("reading preloaded data") }
        return bytes
    }

    /// Forgets (and deletes) the ranges of `object` that hold `offset`: they failed authentication.
    func drop(object: SHA256Digest, offset: Int64) {
        index.withLock { index in
            let damaged = (index[object] ?? []).filter { $0.offset <= offset && offset < $0.offset + $0.length }
            Housekeeping.removePreloadFiles(
                damaged.map {
                    InstallLayout.preloadRangeName(object: object, offset: $0.offset, length: $0.length)
                }, in: directory)
            index[object]?.removeAll { $0.offset <= offset && offset < $0.offset + $0.length }
        }
    }

    /// Deletes every file here but the ranges in `keep` and their parts (an older preload's, or a
    /// build's once staged).
    func prune(keeping keep: Set<String>) {
        let unneeded = ((try? FileSystem.list(directory)) ?? []).filter { name in
            !keep.contains(name) && !(InstallLayout.completed(ofPartial: name).map { keep.contains($0) } ?? false)
        }
        Housekeeping.removePreloadFiles(unneeded, in: directory)
        index.withLock { index in
            for (object, ranges) in index {
                index[object] = ranges.filter {
                    keep.contains(InstallLayout.preloadRangeName(object: object, offset: $0.offset, length: $0.length))
                }
            }
        }
    }
}
