import Foundation
import Synchronization

/// A repository whose source of truth is an S3-compatible bucket (`--origin s3://BUCKET/PREFIX`): every
/// command works on a local cache folder that mirrors the bucket, and a command that writes sends what it
/// wrote back, committing with conditional writes.
///
/// A session (``run(purpose:writes:_:)``):
/// 1. takes the cache folder's own lock (two commands on one machine share one cache), and for a writer
///    the bucket's ``BucketLease``;
/// 2. lists the bucket and brings the cache to exactly its state (``pull(_:leased:)``): files it lacks are
///    downloaded, files the bucket no longer has are removed, `root.json` and `timestamp.json` replaced.
///    Versioned metadata above what `timestamp.json` commits to is a leftover of a writer that stopped
///    before its commit: a lease holder deletes it, nobody downloads it;
/// 3. runs the command on the cache folder, as on any origin folder;
/// 4. for a writer, sends what changed (``push(_:lease:)``): content (objects, packs, manifests) first,
///    then new versioned metadata, each created only if absent (`If-None-Match: *`), then `root.json` and
///    last `timestamp.json`, each replaced only if it is still the version read (`If-Match`). That last
///    write is the commit: before it nothing a player reads has changed; a precondition that fails means
///    another writer committed first, and the command fails as deferred (exit 75) to be run again. Files
///    the command removed (a prune) are deleted from the bucket only after the commit.
///
/// The channels' sequence records are signed into targets metadata, so the bucket holds the high-water
/// mark of every channel. A cache is only a cache: deleting it costs one download of the repository.
public struct BucketOrigin: Sendable {
    public let bucket: S3Bucket
    /// The cache folder: a full origin folder mirroring the bucket.
    public let cache: String
    /// Requests in flight at once.
    public var connections = 8
    /// How long to wait for the lease or the cache's lock.
    public var wait: TimeInterval = 0
    /// How long the lease lives without renewal (``BucketLease/timeToLive``).
    public var leaseTimeToLive = BucketLease.timeToLive

    /// The lock a session holds on its cache folder, beside the origin lock its command takes.
    static let cacheLockName = ".patchsync-bucket.lock"

    public init(bucket: S3Bucket, cache: String? = nil) {
        self.bucket = bucket
        self.cache = cache ?? Self.defaultCache(for: bucket)
    }

    /// `$XDG_CACHE_HOME/patchsync/origins/BUCKET-HASH` (else under `~/.cache`): one folder per bucket,
    /// prefix and endpoint.
    public static func defaultCache(
        for bucket: S3Bucket, environment: [String: String] = ProcessInfo.processInfo.environment
    ) -> String {
        let base =
            environment["XDG_CACHE_HOME"].flatMap { $0.hasPrefix("/") ? $0 : nil }
            ?? (environment["HOME"] ?? NSHomeDirectory()) + "/.cache"
        let identity = "s3://\(bucket.bucket)/\(bucket.prefix) \(bucket.endpoint ?? "aws")"
        let hash = SHA256Hasher.hash(Data(identity.utf8)).hex.prefix(16)
        return "\(base)/patchsync/origins/\(bucket.bucket)-\(hash)"
    }

    /// What a session learnt from the bucket: its listing (without leftovers), and the ETags of the
    /// files that change in place.
    struct Snapshot {
        var listed: [String: ListedObject]
        var timestampETag: String?
        var rootETag: String?
        var timestamp: Data?
        var root: Data?
        var requests = 0
        var leftovers: [String] = []
    }

    /// What a session did, for `--json` and the tests.
    public struct Report: Codable, Sendable {
        public var downloaded = 0
        public var bytesDownloaded: Int64 = 0
        public var uploaded = 0
        public var bytesUploaded: Int64 = 0
        public var deleted = 0
        public var leftoversRemoved = 0
        public var requests = 0
    }

    /// Runs `body` on the cache folder brought up to the bucket's state; a writer then commits what it
    /// wrote. `creating`: the bucket may hold no repository yet (`repo init`).
    public func run<T>(
        purpose: String, writes: Bool, creating: Bool = false, _ body: (String) throws -> T
    ) throws -> (T, Report) {
        let session = try open(purpose: purpose, writes: writes, creating: creating)
        defer { session.close() }
        let result = try body(session.folder)
        return (result, try session.commit())
    }

    /// Starts a session: the cache folder, locked and brought up to the bucket's state (and for a writer,
    /// the lease). The caller runs its command on ``Session/folder``, then calls ``Session/commit()``
    /// (a writer's changes are sent then) and in any case ``Session/close()``.
    public func open(purpose: String, writes: Bool, creating: Bool = false) throws(PatchSyncError) -> Session {
        do { try FileSystem.makeDirectory(cache) } catch {
            throw PatchSyncError.wrap(error).during("creating the cache \(cache)")
        }
        let local = try OriginLock(origin: cache, purpose: purpose, fileName: Self.cacheLockName, wait: wait)
        if !FileSystem.exists(etagRecord),
            OriginLayout.servedFolders.contains(where: { FileSystem.exists(cache + "/" + $0) })
        {
            throw PatchSyncError(
                .usage,
                "\(cache) holds an origin folder that is no cache of a bucket (no \(etagRecord)); a cache is "
                    + "made to match the bucket, which would delete what it holds",
                remedy: "give --cache an empty or new folder (or leave it out), or `patchsync upload` this folder")
        }
        if !FileSystem.exists(etagRecord) { try writeETags([:]) }  // a cache from now on, even if the pull stops
        let lease = writes ? try BucketLease(bucket: bucket, purpose: purpose, wait: wait, ttl: leaseTimeToLive) : nil
        do throws(PatchSyncError) {
            let connection = try S3Connection(bucket)
            var report = Report()
            let state = try pull(connection, leased: lease != nil, report: &report)
            if state.timestamp == nil && !creating {
                throw PatchSyncError(
                    .usage, "s3://\(bucket.bucket)/\(bucket.prefix) holds no repository (no metadata/timestamp.json)",
                    remedy: "check the bucket, prefix and --endpoint; create one with `patchsync repo init --origin "
                        + "\(bucket.commandArguments)`")
            }
            if state.timestamp != nil && creating {
                throw PatchSyncError(
                    .usage, "s3://\(bucket.bucket)/\(bucket.prefix) holds a repository already",
                    remedy: "publish into it, or give another prefix for a new repository")
            }
            report.requests += state.requests
            return Session(
                origin: self, lock: local, lease: lease, connection: connection, state: state, report: report)
        } catch {
            lease?.release()
            throw error
        }
    }

    /// One command's use of the bucket (``open(purpose:writes:creating:)``).
    public final class Session {
        public let folder: String
        private let origin: BucketOrigin
        private var lock: OriginLock?
        private let lease: BucketLease?
        private let connection: S3Connection
        private let state: Snapshot
        private var report: Report

        fileprivate init(
            origin: BucketOrigin, lock: OriginLock, lease: BucketLease?, connection: S3Connection, state: Snapshot,
            report: Report
        ) {
            folder = origin.cache
            self.origin = origin
            self.lock = lock
            self.lease = lease
            self.connection = connection
            self.state = state
            self.report = report
        }

        /// A writer sends what the command wrote and commits it, then deletes from the bucket the files of
        /// `deleting` (paths relative to the origin) the command removed; returns what the session did.
        public func commit(deleting: Set<String> = []) throws(PatchSyncError) -> Report {
            if let lease { try origin.push(connection, state, lease: lease, deleting: deleting, report: &report) }
            return report
        }

        /// Lets go of the lease and the cache's lock. Idempotent.
        public func close() {
            lease?.release()
            lock = nil
        }
    }
}

// MARK: pull

extension BucketOrigin {
    /// Lists the bucket and mirrors it into the cache (see the type's comment).
    func pull(_ connection: S3Connection, leased: Bool, report: inout Report) throws(PatchSyncError) -> Snapshot {
        var state = Snapshot(listed: [:])
        // timestamp.json before the listing: every file the commit it reads names was written before it.
        if let stamp = try connection.getTagged(OriginLayout.timestamp, limit: 1 << 20) {
            guard let etag = stamp.etag else { throw noETag(OriginLayout.timestamp) }
            (state.timestamp, state.timestampETag) = (stamp.body, etag)
        }
        if let root = try connection.getTagged(OriginLayout.rootMetadata, limit: 1 << 20) {
            (state.root, state.rootETag) = (root.body, root.etag)
        }
        state.requests += 2
        let all = try connection.list(requests: &state.requests)
        state.listed = all.filter { OriginLayout.servedFolders.contains(String($0.key.prefix { $0 != "/" })) }
        state.leftovers = try Self.leftovers(Set(state.listed.keys), timestamp: state.timestamp, root: state.root) {
            (path) throws(PatchSyncError) in try connection.get(path, limit: 64 << 20)
        }
        for path in state.leftovers { state.listed[path] = nil }
        if leased, !state.leftovers.isEmpty {
            try fence(&state, connection)
            try Uploader(origin: cache, bucket: bucket, options: uploadOptions).parallel(
                state.leftovers.map { ($0, Int64(0)) }, first: connection
            ) { (connection, file) throws(PatchSyncError) in try connection.delete(file.path) }
            report.leftoversRemoved = state.leftovers.count
        }
        try mirror(state, connection, report: &report)
        return state
    }

    /// Before a lease holder deletes anything (leftovers, or what a prune removed), it changes
    /// `timestamp.json`'s ETag: the same signed bytes followed by 32 random blanks (JSON whitespace, which no
    /// signature covers), never bytes it had before, written over the version read with `If-Match`. A
    /// writer that lost its lease while it still runs can then never commit over what this one deletes or
    /// writes with the version numbers its leftovers had: its commit is conditional on the ETag it read.
    func fence(_ state: inout Snapshot, _ connection: S3Connection) throws(PatchSyncError) {
        guard let timestamp = state.timestamp, let etag = state.timestampETag else { return }
        var fenced = Data(timestamp.reversed().drop { [9, 10, 13, 32].contains($0) }.reversed())
        fenced.append(UInt8(ascii: "\n"))
        for _ in 0..<32 { fenced.append(Bool.random() ? 32 : 9) }
        fenced.append(UInt8(ascii: "\n"))
        guard
            let new = try connection.putOrFind(
                OriginLayout.timestamp, body: fenced, cacheControl: "public, max-age=60",
                contentType: "application/json", when: .matching(etag)), !new.isEmpty
        else {
            throw PatchSyncError(
                .deferred,
                "another writer committed to s3://\(bucket.bucket)/\(bucket.prefix) while this command started",
                remedy: "run the command again: it starts from what the bucket holds now", reason: .busy)
        }
        state.timestamp = fenced
        state.timestampETag = new
        state.requests += 1
    }

    private func noETag(_ path: String) -> PatchSyncError {
        PatchSyncError(
            .originUnavailable, "\(bucket.url(path)) was answered without an ETag",
            remedy: "use a store that gives ETags and conditional writes (AWS S3, R2, MinIO, GCS)")
    }

    var uploadOptions: Uploader.Options {
        var options = Uploader.Options()
        options.connections = max(1, connections)
        return options
    }

    /// Versioned metadata above what the bucket's `timestamp.json` commits to: the snapshot version it
    /// names, the versions that snapshot pins, and `root.json`'s version. No player reads those files.
    static func leftovers(
        _ paths: Set<String>, timestamp: Data?, root: Data?,
        read: (String) throws(PatchSyncError) -> Data?
    ) throws(PatchSyncError) -> [String] {
        guard let timestamp,
            let stamp = try? Signed<TimestampMetadata>(parsing: timestamp, name: OriginLayout.timestampName),
            let snapshotVersion = stamp.signed.meta[OriginLayout.snapshotName]?.version,
            let snapshotData = try read(OriginLayout.metadata(role: "snapshot", version: snapshotVersion)),
            let snapshot = try? Signed<SnapshotMetadata>(parsing: snapshotData, name: OriginLayout.snapshotName)
        else { return [] }
        var committed = snapshot.signed.meta.mapValues(\.version)
        committed[OriginLayout.snapshotName] = snapshotVersion
        if let root, let parsed = try? Signed<RootMetadata>(parsing: root, name: OriginLayout.rootName) {
            committed[OriginLayout.rootName] = parsed.signed.version
        }
        return paths.filter { path in
            guard OriginLayout.isMetadata(path) else { return false }
            let name = path.dropFirst(OriginLayout.metadataFolderName.count + 1)
            guard let dot = name.firstIndex(of: "."), let version = Int(name[..<dot]) else { return false }
            let role = String(name[name.index(after: dot)...])
            // Root versions are never leftovers: players probe for the next one before any commit, so one
            // sent is kept (and the repository goes on from it), as a folder origin keeps every root.
            return role != OriginLayout.rootName && version > committed[role] ?? 0
        }.sorted()
    }

    /// The ETag each file of the cache had in the bucket when it was last downloaded or sent:
    /// `<cache>/.patchsync-bucket-etags.json`. A file whose listing shows that ETag still is the bucket's.
    var etagRecord: String { cache + "/.patchsync-bucket-etags.json" }

    func readETags() -> [String: String] {
        guard let data = try? FileSystem.read(etagRecord, limit: 256 << 20),
            let record = try? JSONDecoder().decode([String: String].self, from: data)
        else { return [:] }
        return record
    }

    /// An ETag without its quotes, as listings and responses give it either way.
    static func plain(_ etag: String) -> String { etag.replacingOccurrences(of: "\"", with: "") }

    func writeETags(_ record: [String: String]) throws(PatchSyncError) {
        let record = record.mapValues(Self.plain)
        let encoder = JSONEncoder()
        encoder.outputFormatting = .sortedKeys
        do { try FileSystem.writeAtomically((try? encoder.encode(record)) ?? Data(), to: etagRecord) } catch {
            throw PatchSyncError.wrap(error).during("recording the bucket's state in \(etagRecord)")
        }
    }

    /// Whether the cache's copy of `path` (`size` bytes locally) is the bucket's `object`: the ETag recorded
    /// for it, or, for an ETag that is an MD5, the same MD5.
    private func holds(_ path: String, size: Int64?, _ object: ListedObject, record: [String: String]) -> Bool {
        guard size == object.size else { return false }
        if let etag = object.etag, record[path] == Self.plain(etag) { return true }
        return object.holds(OriginLayout(root: cache).path(path), bytes: object.size, etagIsMD5: true)
            && ListedObject.plainMD5(object.etag) != nil
    }

    /// Makes the cache hold exactly the bucket's listed files: downloads what it lacks or holds with
    /// other bytes (and the two files that change in place, when their bytes differ), removes what
    /// the bucket does not list.
    private func mirror(_ state: Snapshot, _ connection: S3Connection, report: inout Report) throws(PatchSyncError) {
        let layout = OriginLayout(root: cache)
        var local: [String: Int64] = [:]
        for file in try BuildContents.files(of: cache) { local[file.path] = file.bytes }
        let record = readETags()
        var fetch: [(path: String, bytes: Int64)] = []
        for (path, object) in state.listed.sorted(by: { $0.key < $1.key }) {
            if Uploader.mutable.contains(path) { continue }
            if !holds(path, size: local[path], object, record: record) { fetch.append((path, object.size)) }
        }
        do {
            for (path, _) in local where state.listed[path] == nil { try FileSystem.remove(layout.path(path)) }
            for (path, data) in [(OriginLayout.timestamp, state.timestamp), (OriginLayout.rootMetadata, state.root)] {
                guard let data else { continue }
                if (try? FileSystem.read(layout.path(path), limit: 1 << 20)) != data {
                    try FileSystem.makeDirectory(FileSystem.parent(of: layout.path(path)))
                    try FileSystem.writeAtomically(data, to: layout.path(path))
                }
            }
        } catch { throw PatchSyncError.wrap(error).during("bringing the cache \(cache) up to the bucket") }
        let cache = self.cache
        try Uploader(origin: cache, bucket: bucket, options: uploadOptions).parallel(fetch, first: connection) {
            (connection, file) throws(PatchSyncError) in
            let final = layout.path(file.path), temp = final + ".tmp-\(getpid())"
            do { try FileSystem.makeDirectory(FileSystem.parent(of: final)) } catch {
                throw PatchSyncError.wrap(error).during("writing into \(cache)")
            }
            guard let (size, _) = try connection.download(file.path, to: temp), size == file.bytes else {
                try? FileSystem.remove(temp)
                throw PatchSyncError(
                    .originUnavailable,
                    "\(bucket.url(file.path)) changed while it was read (a size other than its listing's)",
                    remedy: "run the command again; if it goes on, check what else writes this bucket")
            }
            do { try FileSystem.rename(temp, final) } catch { throw PatchSyncError.wrap(error) }
        }
        try writeETags(state.listed.compactMapValues(\.etag))
        dateMetadata(state.listed)
        report.downloaded = fetch.count
        report.bytesDownloaded = fetch.reduce(0) { $0 + $1.bytes }
    }
}

extension BucketOrigin {
    /// Gives each metadata version file of the cache (`metadata/<N>.<role>.json`) the time the bucket got
    /// it (its listing's `LastModified`). `repo prune` reads when a version stopped being current from its
    /// successor's modification time; a cache's own times are those of its downloads, later than the
    /// bucket's, so a machine whose cache is new (a CI runner) would count every grace from now and never
    /// free anything. Only versions, never overwritten: `timestamp.json` and `root.json`, rewritten in
    /// place, keep the time they changed in this cache (a mirror served as is must not show a new one
    /// with the old one's time).
    ///
    /// A date that would make a grace shorter than the truth is not taken: one before the bucket got the
    /// repository's first root (a store that answers the zero time), and one before the date of the
    /// role's previous version (dates of one role go forward). Such a file keeps its download time, which
    /// only makes prune keep more. Best effort: a file this user may not re-date (a cache shared between
    /// users) keeps its time too.
    func dateMetadata(_ listed: [String: ListedObject]) {
        let layout = OriginLayout(root: cache)
        let floor = listed[OriginLayout.metadata(role: "root", version: 1)]?.modified.flatMap(S3Listing.date)
        var versions: [String: [(version: Int, path: String, date: Date)]] = [:]
        for (path, object) in listed where OriginLayout.isMetadata(path) {
            let name = path.dropFirst(OriginLayout.metadataFolderName.count + 1)
            guard let dot = name.firstIndex(of: "."), let version = Int(name[..<dot]),
                let date = object.modified.flatMap(S3Listing.date), date >= floor ?? date
            else { continue }
            versions[String(name[name.index(after: dot)...]), default: []].append((version, path, date))
        }
        for (_, files) in versions {
            var latest = Date.distantPast
            for file in files.sorted(by: { $0.version < $1.version }) {
                latest = max(latest, file.date)
                let full = layout.path(file.path)
                guard let status = try? FileSystem.status(full),
                    status.st_mtim.tv_sec != Int(latest.timeIntervalSince1970.rounded(.down))
                else { continue }
                try? FileSystem.setModified(full, to: latest)
            }
        }
    }
}

// MARK: push

extension BucketOrigin {
    /// Sends what the command wrote, in the order and with the preconditions of the type's comment.
    func push(
        _ connection: S3Connection, _ state: Snapshot, lease: BucketLease, deleting: Set<String>, report: inout Report
    ) throws(PatchSyncError) {
        let layout = OriginLayout(root: cache)
        let files = try BuildContents.files(of: cache)
        let present = Set(files.map(\.path))
        var send: [(path: String, bytes: Int64)] = []
        for file in files {
            if Uploader.mutable.contains(file.path) {
                let data = try? FileSystem.read(layout.path(file.path), limit: 1 << 20)
                let before = file.path == OriginLayout.timestamp ? state.timestamp : state.root
                if data != before { send.append(file) }
            } else if state.listed[file.path]?.size != file.bytes {
                send.append(file)
            }
        }
        // Only what the command removed on purpose (a prune), never a file that changes in place or a root
        // version, and only what the bucket lists: a cache folder emptied by hand deletes nothing.
        let removed = deleting.filter {
            state.listed[$0] != nil && !present.contains($0) && !Uploader.mutable.contains($0)
                && !OriginLayout.isRootVersion($0)
        }.sorted()
        guard !send.isEmpty || !removed.isEmpty else { return }
        let uploader = Uploader(origin: cache, bucket: bucket, options: uploadOptions)
        // Every file a listed build needs is in the cache or the bucket, or nothing is committed.
        var contents = BuildContents.Memo()
        _ = try uploader.neededFiles(
            try Repository.load(origin: cache), files: present.union(Set(state.listed.keys).subtracting(removed)),
            contents: &contents)
        let sent = SentTags()
        let groups = Dictionary(grouping: send, by: { Uploader.group(of: $0.path) }).sorted { $0.key < $1.key }
        for (group, members) in groups {
            if group == 6 {  // timestamp.json: the commit
                CrashPoint.bucketMetadataSent.reached()
                try lease.check()
            }
            try uploader.parallel(members, first: connection) { (connection, file) throws(PatchSyncError) in
                let etag = try commitWrite(file.path, layout: layout, state: state, connection)
                sent.record(file.path, etag)
            }
        }
        try delete(
            removed, committed: send.contains { $0.path == OriginLayout.timestamp }, state, lease: lease,
            connection, uploader)
        var record = state.listed.compactMapValues(\.etag).merging(sent.all) { $1 }
        for path in removed { record[path] = nil }
        try writeETags(record)
        report.uploaded = send.count
        report.bytesUploaded = send.reduce(0) { $0 + $1.bytes }
        report.deleted = removed.count
        report.requests += send.count + removed.count
    }

    /// Deletes what the command removed on purpose: fenced first (unless this push just committed a new
    /// timestamp.json), so a writer that lost its lease can never commit a build naming what goes here.
    private func delete(
        _ removed: [String], committed: Bool, _ state: Snapshot, lease: BucketLease, _ connection: S3Connection,
        _ uploader: Uploader
    ) throws(PatchSyncError) {
        guard !removed.isEmpty else { return }
        var fenced = state
        if !committed { try fence(&fenced, connection) }
        try lease.check()
        try uploader.parallel(removed.map { ($0, Int64(0)) }, first: connection) {
            (connection, file) throws(PatchSyncError) in try connection.delete(file.path)
        }
    }

    /// One PUT of the push, never over a key someone else wrote: content and versioned metadata only
    /// where absent, the two files that change in place only over the version read. A failed
    /// precondition is no failure when the bucket holds these very bytes (an earlier attempt of this
    /// request landed, or the same content stored by another build). Returns the ETag now in the bucket.
    private func commitWrite(_ path: String, layout: OriginLayout, state: Snapshot, _ connection: S3Connection)
        throws(PatchSyncError) -> String?
    {
        let local = layout.path(path)
        let control = Uploader.mutable.contains(path) ? "public, max-age=60" : Uploader.immutable
        let condition: S3Connection.Precondition
        switch path {
        case OriginLayout.timestamp: condition = state.timestampETag.map { .matching($0) } ?? .absent
        case OriginLayout.rootMetadata: condition = state.rootETag.map { .matching($0) } ?? .absent
        default: condition = .absent
        }
        if let etag = try connection.putOrFind(
            path, from: local, cacheControl: control, contentType: Uploader.contentType(path, file: local),
            when: condition)
        {
            return etag.isEmpty ? nil : etag
        }
        throw PatchSyncError(
            .deferred,
            "another writer committed to s3://\(bucket.bucket)/\(bucket.prefix) first (\(path) holds other bytes "
                + "than this command wrote); timestamp.json is as it was, so players see no new build",
            remedy: "run the command again: it starts from what the bucket holds now", reason: .busy)
    }
}

/// The ETags of the files a push sent. Thread-safety: under its mutex (the push's workers record them).
private final class SentTags: Sendable {
    private let tags = Mutex<[String: String]>([:])
    func record(_ path: String, _ etag: String?) { tags.withLock { $0[path] = etag } }
    var all: [String: String] { tags.withLock { $0 } }
}
