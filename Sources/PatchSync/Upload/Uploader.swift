import Foundation
import Synchronization

/// `patchsync upload`: copies an origin folder into an S3-compatible bucket in the order that keeps
/// every client safe, sending only what the bucket lacks.
///
/// What the bucket has is known from the metadata, not by listing its keys: the bucket's
/// `timestamp.json` (one GET) names a snapshot and, through it, a targets version; when the origin
/// folder holds those same versions (checked by their signed hashes), every file the builds they list
/// need is in the bucket already, because an upload writes them before the metadata that names them.
/// An upload that stopped left a journal of what it sent (`.patchsync-upload/`), which the next run skips.
///
/// The order: objects, packs and delta packs, then manifests, then new root versions, targets and
/// snapshot versions, then `root.json` and last `timestamp.json`, each group complete before the next
/// starts, so a client never sees metadata naming a file the bucket does not have yet. Content-addressed
/// and versioned files get `Cache-Control: public, max-age=31536000, immutable`; `timestamp.json` and
/// `root.json`, which change in place, a short max-age.
public struct Uploader: Sendable {
    public struct Options: Sendable {
        /// Requests in flight at once.
        public var connections = 8
        /// The max-age of `timestamp.json` and `root.json`, in seconds: how long a CDN may serve an old one.
        public var metadataMaxAge = 60
        public init() {}
    }

    /// What an upload did.
    public struct Report: Codable, Sendable {
        public var destination: String
        public var filesUploaded: Int
        public var bytesUploaded: Int64
        /// Files of the origin the bucket has already (known from its metadata or the journal).
        public var filesSkipped: Int
        /// Every request sent: the PUTs, the GET of the bucket's timestamp.json and HEADs of root versions.
        public var requests: Int
        /// True when the bucket's timestamp.json is the origin's: nothing was sent.
        public var alreadyCurrent: Bool
    }

    /// Progress of the transfer: bytes and files sent of those to send.
    public struct Progress: Sendable {
        public var bytes: Int64
        public var totalBytes: Int64
        public var files: Int
        public var totalFiles: Int
    }

    public static let immutable = "public, max-age=31536000, immutable"

    public let origin: String
    public let bucket: S3Bucket
    public let options: Options

    public init(origin: String, bucket: S3Bucket, options: Options = Options()) {
        self.origin = origin
        self.bucket = bucket
        self.options = options
    }

    /// Uploads what the bucket lacks. `repo` is the origin already opened (and locked) by the caller,
    /// else the upload opens it, so no publish or prune changes the folder while it is read.
    public func run(repo: Repository? = nil, progress: @Sendable (Progress) -> Void = { _ in }) throws(PatchSyncError) -> Report {
        let held: Repository
        if let repo { held = repo } else { held = try Repository.open(origin: origin, for: "uploading") }
        let connection = try S3Connection(bucket)
        let local = try FileSystem.read(origin + "/metadata/timestamp.json", limit: 1 << 20)
        var report = Report(destination: bucket.publicURL, filesUploaded: 0, bytesUploaded: 0, filesSkipped: 0, requests: 1,
                            alreadyCurrent: false)
        let remote = try connection.get("metadata/timestamp.json", limit: 1 << 20)
        let journal = try Journal(origin: origin, destination: "s3://\(bucket.bucket)/\(bucket.prefix) \(bucket.endpoint ?? "")")
        if remote == local {
            report.alreadyCurrent = true
            try journal.finish()
            return report
        }
        var present = remote.map { self.present(remoteTimestamp: $0) } ?? []
        present.formUnion(journal.done)
        let files = try BuildContents.files(of: origin)
        try checkComplete(held, files: Set(files.map(\.path)))
        if remote != nil {
            for (path, _) in files where Self.isRootVersion(path) && !present.contains(path) {
                report.requests += 1
                if try connection.exists(path) { present.insert(path) }
            }
        }
        let mutable: Set<String> = ["metadata/root.json", "metadata/timestamp.json"]
        let send = files.filter { !present.contains($0.path) || mutable.contains($0.path) }
        report.filesSkipped = files.count - send.count
        let total = Progress(bytes: 0, totalBytes: send.reduce(0) { $0 + $1.bytes }, files: 0, totalFiles: send.count)
        let sent = Mutex(total)
        for group in Dictionary(grouping: send, by: { Self.group(of: $0.path) }).sorted(by: { $0.key < $1.key }) {
            try parallel(group.value, first: connection) { (connection, file) throws(PatchSyncError) in
                try connection.put(file.path, from: origin + "/" + file.path,
                                   cacheControl: mutable.contains(file.path) ? "public, max-age=\(options.metadataMaxAge)" : Self.immutable,
                                   contentType: Self.contentType(file.path))
                if !mutable.contains(file.path) { try journal.record(file.path) }
                let now = sent.withLock { state -> Progress in
                    state.bytes += file.bytes
                    state.files += 1
                    return state
                }
                progress(now)
            }
        }
        try journal.finish()
        withExtendedLifetime(held) {}
        report.filesUploaded = send.count
        report.bytesUploaded = total.totalBytes
        report.requests += send.count
        return report
    }

    /// Refuses, before anything is sent, an origin folder that lacks a file one of its listed builds needs
    /// (deleted by hand, or a copy that stopped half way): the bucket would list a build players cannot install.
    private func checkComplete(_ repo: Repository, files: Set<String>) throws(PatchSyncError) {
        for (path, file) in repo.targetFiles.sorted(by: { $0.key < $1.key }) {
            let missing = try BuildContents.paths(in: origin, target: path, file).subtracting(files)
            if let first = missing.sorted().first {
                throw PatchSyncError(.refusedData, "\(origin) lacks \(first) (and \(missing.count - 1) more), which build "
                                     + "\(file.custom?.buildId ?? path) needs; nothing was uploaded",
                                     remedy: "restore the origin folder from a complete copy, or publish the build again")
            }
        }
    }

    /// Deletes `paths` from the bucket (for `repo prune`), in parallel; returns the requests sent.
    public func delete(_ paths: [String]) throws(PatchSyncError) -> Int {
        try parallel(paths.map { ($0, Int64(0)) }, first: try S3Connection(bucket)) { (connection, file) throws(PatchSyncError) in
            try connection.delete(file.path)
        }
        return paths.count
    }

    /// The files the bucket has for sure: those the builds of its metadata need, when the origin folder
    /// holds that metadata with the hashes the bucket's timestamp.json pins. Empty when it cannot tell.
    private func present(remoteTimestamp data: Data) -> Set<String> {
        guard let stamp = try? Signed<TimestampMetadata>(parsing: data, name: "timestamp.json"),
              let snapPin = stamp.signed.meta["snapshot.json"],
              let snapData = pinned("metadata/\(snapPin.version).snapshot.json", snapPin),
              let snapshot = try? Signed<SnapshotMetadata>(parsing: snapData, name: "snapshot.json"),
              let targetsPin = snapshot.signed.meta["targets.json"],
              let targetsData = pinned("metadata/\(targetsPin.version).targets.json", targetsPin),
              let targets = try? Signed<TargetsMetadata>(parsing: targetsData, name: "targets.json") else { return [] }
        var present = Set<String>()
        for version in 1...max(1, snapPin.version) { present.insert("metadata/\(version).snapshot.json") }
        for version in 1...max(1, targetsPin.version) { present.insert("metadata/\(version).targets.json") }
        for (path, file) in targets.signed.targets {
            // A build whose manifest the folder no longer has is sent again where the folder has its files.
            if let paths = try? BuildContents.paths(in: origin, target: path, file) { present.formUnion(paths) }
        }
        return present
    }

    /// The bytes of the origin's `path` when they match the pin's length and SHA-256.
    private func pinned(_ path: String, _ pin: MetaFile) -> Data? {
        guard let data = try? FileSystem.read(origin + "/" + path, limit: 64 << 20),
              pin.length.map({ $0 == data.count }) ?? true,
              let hash = pin.hashes?["sha256"], hash == SHA256Hasher.hash(data).hex else { return nil }
        return data
    }

    /// Runs `body` on each item with up to `options.connections` workers, each with its own connection
    /// (the first reuses `first`); the first failure stops the others from taking more work.
    private func parallel(_ items: [(path: String, bytes: Int64)], first: S3Connection,
                          _ body: @Sendable (S3Connection, (path: String, bytes: Int64)) throws(PatchSyncError) -> Void) throws(PatchSyncError) {
        guard !items.isEmpty else { return }
        let next = Mutex(0), failure = Mutex<PatchSyncError?>(nil)
        let workers = max(1, min(options.connections, items.count))
        let firstConnection = UncheckedConnection(connection: first)
        DispatchQueue.concurrentPerform(iterations: workers) { worker in
            let connection: S3Connection
            if worker == 0 { connection = firstConnection.connection } else {
                do throws(PatchSyncError) { connection = try S3Connection(bucket) } catch {
                    failure.withLock { $0 = $0 ?? error }
                    return
                }
            }
            while failure.withLock({ $0 == nil }) {
                let index = next.withLock { value -> Int in
                    defer { value += 1 }
                    return value
                }
                guard index < items.count else { return }
                do throws(PatchSyncError) { try body(connection, items[index]) } catch { failure.withLock { $0 = $0 ?? error } }
            }
        }
        if let error = failure.withLock({ $0 }) { throw error }
    }

    /// The upload order: content first, then manifests, then metadata from root versions to timestamp.json.
    static func group(of path: String) -> Int {
        if path.hasPrefix("objects/") { return 0 }
        if path.hasPrefix("targets/") { return 1 }
        if isRootVersion(path) { return 2 }
        if path.hasSuffix(".targets.json") { return 3 }
        if path.hasSuffix(".snapshot.json") { return 4 }
        if path == "metadata/timestamp.json" { return 6 }
        return 5  // root.json
    }

    static func isRootVersion(_ path: String) -> Bool {
        path.hasPrefix("metadata/") && path.hasSuffix(".root.json") && path.dropFirst(9).first?.isNumber == true
    }

    static func contentType(_ path: String) -> String {
        path.hasSuffix(".json") ? "application/json" : path.hasSuffix(".gz") ? "application/gzip" : "application/octet-stream"
    }
}

/// A connection handed to the first worker: only that worker uses it while `parallel` runs.
private struct UncheckedConnection: @unchecked Sendable {
    let connection: S3Connection
}

/// The paths an unfinished upload to one destination sent, one per line in
/// `<origin>/.patchsync-upload/<SHA-256 of the destination>`; removed when an upload completes.
/// Thread-safety: `file` is written under its lock.
private final class Journal: Sendable {
    let done: Set<String>
    private let path: String
    private let file: Mutex<FileDescriptor?>

    init(origin: String, destination: String) throws(PatchSyncError) {
        let folder = origin + "/.patchsync-upload"
        path = folder + "/" + SHA256Hasher.hash(Data(destination.utf8)).hex
        let text = FileSystem.exists(path) ? String(decoding: try FileSystem.read(path, limit: 256 << 20), as: UTF8.self) : ""
        done = Set(text.split(separator: "\n").map(String.init))
        do {
            try FileSystem.makeDirectory(folder)
            file = Mutex(try FileDescriptor(path: path, flags: O_WRONLY | O_CREAT | O_APPEND, mode: 0o644))
        } catch { throw PatchSyncError.wrap(error).during("opening the upload journal \(path)") }
    }

    func record(_ sent: String) throws(PatchSyncError) {
        let line = Array((sent + "\n").utf8)
        let result = file.withLock { file -> Int in
            guard let file else { return -1 }
            return line.withUnsafeBytes { write(file.fd, $0.baseAddress, $0.count) }
        }
        guard result == line.count else {
            throw PatchSyncError.wrap(Errno(errno, "writing the upload journal", path))
        }
    }

    /// The upload is complete: the bucket's metadata now says what it has.
    func finish() throws(PatchSyncError) {
        file.withLock { $0 = nil }
        do { try FileSystem.remove(path) } catch where error.code == ENOENT {} catch { throw PatchSyncError.wrap(error) }
    }
}
