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
/// A bucket can lose files behind the metadata's back (a lifecycle rule, a delete by hand): `verify`
/// lists its keys instead and sends again what it lacks or holds with another size; `force` sends every
/// file again.
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
        /// Upload over a bucket whose metadata is newer than the origin's or forked from it, and send
        /// every file again, whatever the bucket's metadata, the journal or its listing say it has.
        public var force = false
        /// List the bucket's keys (ListObjectsV2, one request per 1,000 keys; s3:ListBucket) and send every
        /// file it lacks or holds with another size, even when its timestamp.json is the origin's.
        public var verify = false
        public init() {}
    }

    /// What an upload did.
    public struct Report: Codable, Sendable {
        public var destination: String
        public var filesUploaded: Int
        public var bytesUploaded: Int64
        /// Files of the origin not sent: the bucket has them (known from its metadata or the journal), or
        /// no build targets.json lists needs them.
        public var filesSkipped: Int
        /// Every request sent: the PUTs, the GET of the bucket's timestamp.json, HEADs of root versions and
        /// the pages of its listing (``Options/verify``).
        public var requests: Int
        /// True when the bucket's timestamp.json is the origin's: nothing was sent.
        public var alreadyCurrent: Bool
        /// True when the bucket's keys were listed (``Options/verify``) to decide what it lacks.
        public var verified: Bool
        /// Files sent again that the bucket was taken to have (its metadata or timestamp.json named them,
        /// or the journal recorded them): with `verify` those its listing lacked or held with another
        /// size, with `force` all of them. Sorted.
        public var resent: [String]
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

    private var layout: OriginLayout { OriginLayout(root: origin) }

    public init(origin: String, bucket: S3Bucket, options: Options = Options()) {
        self.origin = origin
        self.bucket = bucket
        self.options = options
    }

    /// Uploads what the bucket lacks. `repo` is the origin already opened (and locked) by the caller,
    /// else the upload opens it, so no publish or prune changes the folder while it is read. `skipping`:
    /// files never to send (those a prune is about to remove).
    public func run(
        repo: Repository? = nil, skipping: Set<String> = [],
        progress: @escaping @Sendable (Progress) -> Void = { _ in }
    ) throws(PatchSyncError) -> Report {
        let held: Repository
        if let repo { held = repo } else { held = try Repository.open(origin: origin, for: "uploading") }
        defer { withExtendedLifetime(held) {} }
        let connection = try S3Connection(bucket)
        let local = try FileSystem.read(layout.timestampFile, limit: 1 << 20)
        var report = Report(
            destination: bucket.publicURL, filesUploaded: 0, bytesUploaded: 0, filesSkipped: 0, requests: 1,
            alreadyCurrent: false, verified: false, resent: [])
        let remote = try connection.get(OriginLayout.timestamp, limit: 1 << 20)
        let journal = try Journal(
            origin: origin, destination: "s3://\(bucket.bucket)/\(bucket.prefix) \(bucket.endpoint ?? "")",
            bucketState: remote.map { SHA256Hasher.hash($0).hex } ?? "empty")
        let sameTimestamp = remote == local
        var current = sameTimestamp
        if current {
            // A new root alone (a root key rotated) leaves timestamp.json as it was: the bucket is current
            // only when it serves this root too.
            report.requests += 1
            let localRoot = try FileSystem.read(layout.path(OriginLayout.rootMetadata), limit: 1 << 20)
            current = try connection.get(OriginLayout.rootMetadata, limit: 1 << 20) == localRoot
        }
        if current && !options.force && !options.verify {
            report.alreadyCurrent = true
            try journal.finish()
            return report
        }
        if let remote, !sameTimestamp, !options.force { try checkNotAhead(remote: remote, local: local) }
        var contents = BuildContents.Memo()  // each manifest read once, for both questions
        let files = try BuildContents.files(of: origin)
        // What players can ask for: the metadata, and what the builds targets.json lists need. Content of
        // builds no longer listed (held by prune's grace, or leftovers) is not sent again.
        let needed = try neededFiles(held, files: Set(files.map(\.path)), contents: &contents)
        let wanted = files.filter {
            (OriginLayout.isMetadata($0.path) || OriginLayout.isNeeded($0.path, in: needed))
                && !skipping.contains($0.path)
        }
        // What the bucket is taken to have: all of it when its timestamp.json is the origin's.
        var believed: Set<String> = []
        if current {
            believed = Set(wanted.map(\.path))
        } else if let remote {
            believed = present(remoteTimestamp: remote, contents: &contents)
        }
        believed.formUnion(journal.done)
        let send = try choose(wanted, believed: believed, current: current, remote: remote != nil, connection, &report)
        if let large = send.first(where: { $0.bytes > Self.maxObjectBytes }) {
            throw PatchSyncError(
                .usage, "\(origin)/\(large.path) is \(large.bytes) bytes, over the 5 GiB that one PUT of S3 may carry",
                remedy: "split the file in the build, or upload this origin with a tool that uses multipart "
                    + "uploads (aws s3 sync), in the order the README gives")
        }
        report.filesSkipped = files.count - send.count
        report.alreadyCurrent = current && send.isEmpty
        try transfer(send, connection: connection, journal: journal, progress: progress)
        try journal.finish()
        report.filesUploaded = send.count
        report.bytesUploaded = send.reduce(0) { $0 + $1.bytes }
        report.requests += send.count
        return report
    }

    /// `timestamp.json` and `root.json`: the files that change in place, sent whenever the bucket's
    /// timestamp.json is not the origin's, and never recorded in the journal.
    static let mutable: Set<String> = [OriginLayout.rootMetadata, OriginLayout.timestamp]

    /// The files of `wanted` to send: all of them with `force`; with `verify` those the bucket's listing
    /// lacks or holds with another size or content (its ETag, ``ListedObject/holds(_:bytes:)``); else those not in `believed` and not found by a HEAD (root
    /// versions). Files that change in place go whenever the bucket's timestamp.json is not the origin's
    /// (`current`). Counts its requests in `report`, and there names the files sent again that were
    /// `believed` to be in the bucket.
    private func choose(
        _ wanted: [(path: String, bytes: Int64)], believed: Set<String>, current: Bool, remote: Bool,
        _ connection: S3Connection, _ report: inout Report
    ) throws(PatchSyncError) -> [(path: String, bytes: Int64)] {
        let send: [(path: String, bytes: Int64)]
        if options.force {
            send = wanted
        } else if options.verify {
            let listed = try connection.list(requests: &report.requests)
            report.verified = true
            let md5 = ListedObject.etagsAreMD5(listed, files: wanted, root: layout)
            send = wanted.filter { file in
                !(listed[file.path]?.holds(layout.path(file.path), bytes: file.bytes, etagIsMD5: md5) ?? false)
                    || (!current && Self.mutable.contains(file.path))
            }
        } else {
            var present = believed
            if remote {
                for (path, _) in wanted where OriginLayout.isRootVersion(path) && !present.contains(path) {
                    report.requests += 1
                    if try connection.exists(path) { present.insert(path) }
                }
            }
            return wanted.filter { !present.contains($0.path) || Self.mutable.contains($0.path) }
        }
        report.resent = send.map(\.path).filter { believed.contains($0) }.sorted()
        return send
    }

    /// Sends `files` group by group (``group(of:)``), each complete before the next starts, recording
    /// each immutable one in `journal` once the store has it.
    private func transfer(
        _ files: [(path: String, bytes: Int64)], connection: S3Connection, journal: Journal,
        progress: @escaping @Sendable (Progress) -> Void
    ) throws(PatchSyncError) {
        let total = Progress(bytes: 0, totalBytes: files.reduce(0) { $0 + $1.bytes }, files: 0, totalFiles: files.count)
        let sent = ProgressTally(total)
        for group in Dictionary(grouping: files, by: { Self.group(of: $0.path) }).sorted(by: { $0.key < $1.key }) {
            try parallel(group.value, first: connection) { (connection, file) throws(PatchSyncError) in
                let mutable = Self.mutable.contains(file.path)
                try connection.put(
                    file.path, from: layout.path(file.path),
                    cacheControl: mutable ? "public, max-age=\(options.metadataMaxAge)" : Self.immutable,
                    contentType: Self.contentType(file.path, file: layout.path(file.path)))
                if !mutable { try journal.record(file.path) }
                let now = sent.state.withLock { state -> Progress in
                    state.bytes += file.bytes
                    state.files += 1
                    return state
                }
                progress(now)
            }
        }
    }

    /// One PUT's limit in S3 (5 GiB).
    static let maxObjectBytes: Int64 = 5 << 30

    /// The snapshot and targets versions the bucket serves now (nil: an empty bucket, or versions the
    /// origin folder no longer holds): what `repo prune --bucket` must treat as current whatever the
    /// folder's file times say.
    public func servedVersions() throws(PatchSyncError) -> (snapshot: Int, targets: Int)? {
        guard let remote = try S3Connection(bucket).get(OriginLayout.timestamp, limit: 1 << 20),
            let served = served(remoteTimestamp: remote)
        else { return nil }
        return (served.snapshot, served.targets.version)
    }

    /// The snapshot version the bucket's timestamp.json names and the targets pin of that snapshot, when
    /// the origin folder holds that snapshot with the hash the timestamp pins; nil otherwise.
    func served(remoteTimestamp data: Data) -> (snapshot: Int, targets: MetaFile)? {
        guard let stamp = try? Signed<TimestampMetadata>(parsing: data, name: OriginLayout.timestampName),
            let snapPin = stamp.signed.meta[OriginLayout.snapshotName],
            let snapData = pinned(OriginLayout.metadata(role: "snapshot", version: snapPin.version), snapPin),
            let snapshot = try? Signed<SnapshotMetadata>(parsing: snapData, name: OriginLayout.snapshotName),
            let targetsPin = snapshot.signed.meta[OriginLayout.targetsName]
        else { return nil }
        return (snapPin.version, targetsPin)
    }

    /// Refuses to overwrite a bucket whose timestamp.json is newer than the origin's, or the same version
    /// with other bytes, or that names a snapshot the origin holds with other bytes: the folder is older
    /// than what players see (a restored backup) or another copy of the repository uploads here. Players
    /// who saw the newer metadata would refuse the older one, and immutable files would fork.
    private func checkNotAhead(remote: Data, local: Data) throws(PatchSyncError) {
        guard let theirs = try? Signed<TimestampMetadata>(parsing: remote, name: OriginLayout.timestampName) else {
            throw PatchSyncError(
                .refusedData, "\(bucket.publicURL)/\(OriginLayout.timestamp) is not TUF timestamp metadata",
                remedy: "check the destination: it should be a bucket only patchsync uploads to (or give --force)")
        }
        let ours: Signed<TimestampMetadata> = try Signed(parsing: local, name: layout.timestampFile)
        let snapPin = theirs.signed.meta[OriginLayout.snapshotName]
        let snapPath = OriginLayout.metadata(role: "snapshot", version: snapPin?.version ?? 0)
        let forked =
            theirs.signed.version >= ours.signed.version
            || (snapPin.map { FileSystem.exists(layout.path(snapPath)) && pinned(snapPath, $0) == nil } ?? false)
        guard forked else { return }
        throw PatchSyncError(
            .refusedData,
            "\(bucket.publicURL) serves timestamp version \(theirs.signed.version) "
                + "(snapshot \(snapPin?.version ?? 0)), and \(origin) has version \(ours.signed.version)"
                + (theirs.signed.version < ours.signed.version ? " with another snapshot \(snapPin?.version ?? 0)" : "")
                + ": the folder is not the one this bucket was uploaded from, or is older than it",
            remedy: "upload from the origin folder that publishes to this bucket (a restored backup must be "
                + "brought up to date first); --force overwrites, and players who saw the bucket's newer "
                + "metadata then refuse updates until a publish passes its versions")
    }

    /// What the builds the origin lists need, refused when the folder lacks any of it (deleted by hand, or
    /// a copy that stopped half way): the bucket would list a build players cannot install.
    func neededFiles(
        _ repo: Repository, files: Set<String>,
        contents: inout BuildContents.Memo
    ) throws(PatchSyncError) -> Set<String> {
        var needed = BuildContents.releasedKeys(of: repo)
        for (path, file) in repo.targetFiles.sorted(by: { $0.key < $1.key }) {
            let paths = try contents.paths(in: origin, target: path, file)
            let missing = paths.subtracting(files)
            if let first = missing.sorted().first {
                throw PatchSyncError(
                    .refusedData,
                    "\(origin) lacks \(first) (and \(missing.count - 1) more), which build "
                        + "\(file.custom?.buildId ?? path) needs; nothing was uploaded",
                    remedy: "restore the missing files from a complete copy of the origin folder (or the bucket, if it "
                        + "has them); an object may hold chunks of several builds, so publishing one again does not "
                        + "rebuild it")
            }
            needed.formUnion(paths)
        }
        return needed
    }

    /// Deletes `paths` from the bucket (for `repo prune`), in parallel; returns the requests sent.
    public func delete(_ paths: [String]) throws(PatchSyncError) -> Int {
        try parallel(paths.map { ($0, Int64(0)) }, first: try S3Connection(bucket)) {
            (connection, file) throws(PatchSyncError) in
            try connection.delete(file.path)
        }
        return paths.count
    }

    /// The files the bucket has for sure: those the builds of its metadata need, when the origin folder
    /// holds that metadata with the hashes the bucket's timestamp.json pins. Empty when it cannot tell.
    func present(remoteTimestamp data: Data, contents: inout BuildContents.Memo) -> Set<String> {
        guard let served = served(remoteTimestamp: data),
            let targetsData = pinned(
                OriginLayout.metadata(role: "targets", version: served.targets.version), served.targets),
            let targets = try? Signed<TargetsMetadata>(parsing: targetsData, name: OriginLayout.targetsName)
        else { return [] }
        var present = Set<String>()
        for version in 1...max(1, served.snapshot) {
            present.insert(OriginLayout.metadata(role: "snapshot", version: version))
        }
        for version in 1...max(1, served.targets.version) {
            present.insert(OriginLayout.metadata(role: "targets", version: version))
        }
        for (path, file) in targets.signed.targets {
            // A build whose manifest the folder no longer has is sent again where the folder has its files.
            if let paths = try? contents.paths(in: origin, target: path, file) { present.formUnion(paths) }
        }
        return present
    }

    /// The bytes of the origin's `path` when they match the pin's length and SHA-256.
    private func pinned(_ path: String, _ pin: MetaFile) -> Data? {
        guard let data = try? FileSystem.read(layout.path(path), limit: 64 << 20),
            pin.length.map({ $0 == data.count }) ?? true,
            let hash = pin.hashes?["sha256"], hash == SHA256Hasher.hash(data).hex
        else { return nil }
        return data
    }

    /// Runs `body` on each item on `options.connections` threads of its own (requests block), each with
    /// its own connection (the first reuses `first`); the first failure stops the others taking more work.
    func parallel(
        _ items: [(path: String, bytes: Int64)], first: S3Connection,
        _ body: @escaping @Sendable (S3Connection, (path: String, bytes: Int64)) throws(PatchSyncError) -> Void
    )
        throws(PatchSyncError)
    {
        guard !items.isEmpty else { return }
        let queue = WorkQueue()
        let done = DispatchGroup()
        let firstConnection = UncheckedConnection(connection: first)
        let bucket = self.bucket
        for worker in 0..<max(1, min(options.connections, items.count)) {
            done.enter()
            Thread {
                defer { done.leave() }
                let connection: S3Connection
                if worker == 0 {
                    connection = firstConnection.connection
                } else {
                    do throws(PatchSyncError) { connection = try S3Connection(bucket) } catch {
                        return queue.fail(error)
                    }
                }
                while let index = queue.take(below: items.count) {
                    do throws(PatchSyncError) { try body(connection, items[index]) } catch { queue.fail(error) }
                }
            }.start()
        }
        done.wait()
        if let error = queue.failure { throw error }
    }

    /// The upload order: content first, then manifests, then metadata from root versions to timestamp.json.
    static func group(of path: String) -> Int {
        if OriginLayout.isObject(path) { return 0 }
        if OriginLayout.isTarget(path) { return 1 }
        if OriginLayout.isRootVersion(path) { return 2 }
        if OriginLayout.isMetadata(path, role: "targets") || OriginLayout.isMetadata(path, role: Releases.role) {
            return 3
        }
        if OriginLayout.isMetadata(path, role: "snapshot") { return 4 }
        if path == OriginLayout.timestamp { return 6 }
        return 5  // root.json
    }

    /// The media type a store serves `path` with, its bytes read from `file`. A manifest target keeps its
    /// `.json.gz` name (CDN rules and tools match it) while a build's manifest is zstd (format 8): what it
    /// is named says less than its first bytes (zstd's frame magic, RFC 8878's `application/zstd`).
    static func contentType(_ path: String, file: String) -> String {
        if path.hasSuffix(".json") { return "application/json" }
        guard path.hasSuffix(".gz") else { return "application/octet-stream" }
        var magic = [UInt8](repeating: 0, count: 4)
        let read = (try? FileDescriptor(path: file, flags: O_RDONLY)).flatMap { descriptor in
            try? magic.withUnsafeMutableBytes { try descriptor.readFully(into: $0) }
        }
        return read == 4 && magic == Zstd.magic ? "application/zstd" : "application/gzip"
    }
}

/// An upload's progress, shared by its workers. Thread-safety: under its mutex.
private final class ProgressTally: Sendable {
    let state: Mutex<Uploader.Progress>
    init(_ start: Uploader.Progress) { state = Mutex(start) }
}

/// The next item of `parallel` and its first failure. Thread-safety: both under their mutexes.
private final class WorkQueue: Sendable {
    private let next = Mutex(0)
    private let failed = Mutex<PatchSyncError?>(nil)

    /// The next index below `count`, nil once every item is taken or a worker failed.
    func take(below count: Int) -> Int? {
        guard failure == nil else { return nil }
        return next.withLock { value -> Int? in
            guard value < count else { return nil }
            defer { value += 1 }
            return value
        }
    }

    func fail(_ error: PatchSyncError) { failed.withLock { $0 = $0 ?? error } }
    var failure: PatchSyncError? { failed.withLock { $0 } }
}

/// A connection handed to the first worker: only that worker uses it while `parallel` runs.
private struct UncheckedConnection: @unchecked Sendable {
    let connection: S3Connection
}

/// The paths an unfinished upload to one destination sent, one per line in
/// `<origin>/.patchsync-upload/<SHA-256 of the destination>` after a first line naming the state of the
/// bucket it started from (its timestamp.json's SHA-256, or "empty"); removed when an upload completes.
/// A bucket found in another state (emptied, replaced, uploaded to from elsewhere) voids the journal.
/// Thread-safety: `file` is written under its lock.
private final class Journal: Sendable {
    let done: Set<String>
    private let path: String
    private let file: Mutex<FileDescriptor?>

    init(origin: String, destination: String, bucketState: String) throws(PatchSyncError) {
        let layout = OriginLayout(root: origin)
        let folder = layout.uploadJournalFolder
        path = layout.uploadJournal(SHA256Hasher.hash(Data(destination.utf8)).hex)
        let text =
            FileSystem.exists(path) ? String(decoding: try FileSystem.read(path, limit: 256 << 20), as: UTF8.self) : ""
        let lines = text.split(separator: "\n").map(String.init)
        let header = "bucket " + bucketState
        let valid = lines.first == header
        done = valid ? Set(lines.dropFirst()) : []
        do {
            try FileSystem.makeDirectory(folder)
            let file = try FileDescriptor(
                path: path, flags: O_WRONLY | O_CREAT | O_APPEND | (valid ? 0 : O_TRUNC), mode: 0o644)
            if !valid { try file.write(Data((header + "\n").utf8)) }
            self.file = Mutex(file)
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
        do { try FileSystem.remove(path) } catch  where error.code == ENOENT {} catch {
            throw PatchSyncError.wrap(error)
        }
    }
}
