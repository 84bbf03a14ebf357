import Foundation

/// The agent's state in `.patchsync/state.db`: the ``InstallState`` (one row, changed only in
/// whole transactions), the stat cache and file list of installed deployments, and the records
/// of the chunks written and verified in the deployment being staged.
///
/// Thread-safety: all access goes through one ``Database`` connection, which serialises calls;
/// other processes' writes are serialised by SQLite (BEGIN IMMEDIATE with a busy timeout).
final class StateStore: Sendable {
    let database: Database

    /// A destination of a chunk in the staged build: file path and chunk index.
    struct ChunkRef: Hashable, Sendable {
        var path: String
        var index: Int
    }

    /// What a resume record vouches for: the chunk (by its hash) written at `ref`, in the file
    /// whose inode was `inode` then.
    struct ChunkRecord: Hashable, Sendable {
        var ref: ChunkRef
        var sha256: String
        var inode: Int64
    }

    /// A staged file as it was right after a flush made its recorded chunks durable: while the file
    /// still stats the same (inode, size, modification and change times), nothing has written to it
    /// since, so its records vouch for its bytes without reading them again.
    struct FileStamp: Hashable, Sendable {
        var path: String
        var inode: Int64
        var size: Int64
        var modifiedNanoseconds: Int64
        var changedNanoseconds: Int64
        /// The boot the stamp was taken in (``BootID``): staged bytes are not synced as they are
        /// written, so after a reboot the page cache that held them is gone and a stamp of an earlier
        /// boot vouches for nothing.
        var boot: String = BootID.current

        init(path: String, _ st: stat) {
            self.path = path
            inode = Int64(st.st_ino)
            size = Int64(st.st_size)
            modifiedNanoseconds = Int64(st.st_mtim.tv_sec) * 1_000_000_000 + Int64(st.st_mtim.tv_nsec)
            changedNanoseconds = Int64(st.st_ctim.tv_sec) * 1_000_000_000 + Int64(st.st_ctim.tv_nsec)
        }

        init(
            path: String, inode: Int64, size: Int64, modifiedNanoseconds: Int64, changedNanoseconds: Int64, boot: String
        ) {
            (self.path, self.inode, self.size) = (path, inode, size)
            (self.modifiedNanoseconds, self.changedNanoseconds, self.boot) = (
                modifiedNanoseconds, changedNanoseconds, boot
            )
        }
    }

    /// What the stat cache remembers of an installed file.
    struct FileStat: Hashable, Sendable {
        var size: Int64
        var modifiedNanoseconds: Int64
        var inode: Int64

        init(size: Int64, modifiedNanoseconds: Int64, inode: Int64) {
            self.size = size
            self.modifiedNanoseconds = modifiedNanoseconds
            self.inode = inode
        }

        init(_ st: stat) {
            size = Int64(st.st_size)
            modifiedNanoseconds = Int64(st.st_mtim.tv_sec) * 1_000_000_000 + Int64(st.st_mtim.tv_nsec)
            inode = Int64(st.st_ino)
        }
    }

    init(path: String, readOnly: Bool = false) throws(PatchSyncError) {
        database = try Database(path: path, readOnly: readOnly)
        if !readOnly {
            try database.execute(
                """
                CREATE TABLE IF NOT EXISTS install_state(id INTEGER PRIMARY KEY CHECK (id = 1),
                    version INTEGER NOT NULL, body TEXT NOT NULL);
                CREATE TABLE IF NOT EXISTS stat_cache(build TEXT NOT NULL, path TEXT NOT NULL, size INTEGER NOT NULL,
                    mtime_ns INTEGER NOT NULL, inode INTEGER NOT NULL, PRIMARY KEY(build, path));
                CREATE TABLE IF NOT EXISTS build_file(build TEXT NOT NULL, path TEXT NOT NULL, size INTEGER NOT NULL,
                    mode INTEGER NOT NULL, sha256 TEXT NOT NULL, PRIMARY KEY(build, path));
                CREATE TABLE IF NOT EXISTS staged_chunk(deployment TEXT NOT NULL, path TEXT NOT NULL,
                    chunk INTEGER NOT NULL, sha256 TEXT NOT NULL, inode INTEGER NOT NULL,
                    PRIMARY KEY(deployment, path, chunk));
                CREATE TABLE IF NOT EXISTS staged_stamp(deployment TEXT NOT NULL, path TEXT NOT NULL,
                    inode INTEGER NOT NULL, size INTEGER NOT NULL, mtime_ns INTEGER NOT NULL, ctime_ns INTEGER NOT NULL,
                    boot TEXT NOT NULL, PRIMARY KEY(deployment, path));
                DROP TABLE IF EXISTS staged_file;
                DROP TABLE IF EXISTS setting;
                DROP TABLE IF EXISTS chunk_done;
                """)
        }
    }

    // MARK: the install state

    /// The install state as last committed.
    func read() throws(PatchSyncError) -> InstallState {
        try Self.decode(try database.query("SELECT version, body FROM install_state WHERE id = 1"))
    }

    /// Changes the install state in one transaction: reads it, lets `transition` change it, and writes
    /// it back with whatever the change implies for the resume records (a deployment that is no longer
    /// being staged loses them). Then `point` is reached (tests kill there).
    /// With `records`, what it writes (a staged build's file records, given the state before) is in the
    /// same transaction.
    @discardableResult
    func update<T>(
        _ point: CrashPoint? = nil,
        records: ((Database.Transaction, InstallState) throws(PatchSyncError) -> Void)? = nil,
        _ transition: (inout InstallState) throws(PatchSyncError) -> T
    ) throws(PatchSyncError) -> T {
        let result = try database.transaction { (t) throws(PatchSyncError) -> T in
            let before = try Self.decode(try t.query("SELECT version, body FROM install_state WHERE id = 1"))
            try records?(t, before)
            var after = before
            let result = try transition(&after)
            guard after != before else { return result }
            try t.run(
                "INSERT OR REPLACE INTO install_state(id, version, body) VALUES(1, ?, ?)",
                rows: [[.integer(Int64(InstallState.formatVersion)), .text(try Self.encode(after))]])
            if before.staging != after.staging {
                for table in ["staged_chunk", "staged_stamp"] {
                    try t.run(
                        "DELETE FROM \(table) WHERE deployment IS NOT ?",
                        rows: [[after.staging.map { .text($0.name) } ?? .null]])
                }
            }
            return result
        }
        point?.reached()
        return result
    }

    private static func decode(_ rows: [[Database.Value]]) throws(PatchSyncError) -> InstallState {
        guard let row = rows.first else { return InstallState() }
        guard let version = row[0].integer, version <= InstallState.formatVersion else {
            throw PatchSyncError(
                .refusedData,
                "the install's state.db was written by a newer PatchSync "
                    + "(state format \(row[0].integer ?? -1), this one reads \(InstallState.formatVersion))",
                remedy: "update PatchSync, or create the install again with `patchsync init`")
        }
        do { return try JSONDecoder.iso.decode(InstallState.self, from: Data((row[1].text ?? "").utf8)) } catch {
            throw PatchSyncError(
                .localIO, "the install's state in state.db does not decode",
                remedy: "create the install again with `patchsync init`", cause: error)
        }
    }

    private static func encode(_ state: InstallState) throws(PatchSyncError) -> String {
        let encoder = JSONEncoder.iso
        encoder.outputFormatting = .sortedKeys
        do { return String(decoding: try encoder.encode(state), as: UTF8.self) } catch {
            throw PatchSyncError(.internal, "encoding the install state", cause: error)
        }
    }

    // MARK: installed deployments

    func statCache(build: String) throws(PatchSyncError) -> [String: FileStat] {
        var cache: [String: FileStat] = [:]
        let count = try database.query("SELECT count(*) FROM stat_cache WHERE build = ?", [.text(build)])
        cache.reserveCapacity(Int(count.first?[0].integer ?? 0))
        try Self.readStats(
            database.query("SELECT path, size, mtime_ns, inode FROM stat_cache WHERE build = ?", [.text(build)]),
            into: &cache)
        return cache
    }

    /// The stat cache of `paths` of `build` only (a few hundred looked up per query).
    func statCache(build: String, paths: [String]) throws(PatchSyncError) -> [String: FileStat] {
        var cache: [String: FileStat] = [:]
        cache.reserveCapacity(paths.count)
        var start = 0
        while start < paths.count {
            let batch = paths[start..<min(start + 500, paths.count)]
            start += batch.count
            let marks = Array(repeating: "?", count: batch.count).joined(separator: ", ")
            try Self.readStats(
                database.query(
                    "SELECT path, size, mtime_ns, inode FROM stat_cache WHERE build = ? AND path IN (\(marks))",
                    [.text(build)] + batch.map { .text($0) }),
                into: &cache)
        }
        return cache
    }

    /// Rows of (path, size, mtime_ns, inode) into `cache`.
    private static func readStats(_ rows: [[Database.Value]], into cache: inout [String: FileStat]) {
        for row in rows {
            guard let path = row[0].text, let size = row[1].integer, let mtime = row[2].integer,
                let inode = row[3].integer
            else { continue }
            cache[path] = FileStat(size: size, modifiedNanoseconds: mtime, inode: inode)
        }
    }

    func saveStatCache(build: String, _ entries: [String: FileStat]) throws(PatchSyncError) {
        try database.transaction { (t) throws(PatchSyncError) in try Self.saveStatCache(t, build: build, entries) }
    }

    static func saveStatCache(_ t: Database.Transaction, build: String, _ entries: [String: FileStat])
        throws(PatchSyncError)
    {
        try t.run(
            """
            INSERT OR REPLACE INTO stat_cache(build, path, size, mtime_ns, inode) VALUES(?, ?, ?, ?, ?)
            """,
            rows: entries.lazy.map { path, s in
                [.text(build), .text(path), .integer(s.size), .integer(s.modifiedNanoseconds), .integer(s.inode)]
            })
    }

    /// Forgets the records under `build` of `paths` (files a build staged in a recycled folder has not
    /// kept as they were).
    static func forgetFiles(_ t: Database.Transaction, build: String, _ paths: [String]) throws(PatchSyncError) {
        for table in ["stat_cache", "build_file"] {
            try t.run(
                "DELETE FROM \(table) WHERE build = ? AND path = ?", rows: paths.lazy.map { [.text(build), .text($0)] })
        }
    }

    /// What a deployment's files must be, kept with the stat cache so that a fast verify
    /// needs no manifest: path, size, permission bits as installed, SHA-256.
    struct BuildFile: Sendable {
        var path: String
        var size: Int64
        var mode: UInt32
        var sha256: String
    }

    func saveBuildFiles(build: String, _ files: [BuildFile]) throws(PatchSyncError) {
        try database.transaction { (t) throws(PatchSyncError) in try Self.saveBuildFiles(t, build: build, files) }
    }

    static func saveBuildFiles(_ t: Database.Transaction, build: String, _ files: some Sequence<BuildFile>)
        throws(PatchSyncError)
    {
        try t.run(
            "INSERT OR REPLACE INTO build_file(build, path, size, mode, sha256) VALUES(?, ?, ?, ?, ?)",
            rows: files.lazy.map {
                [
                    .text(build), .text($0.path), .integer($0.size), .integer(Int64($0.mode)),
                    .text($0.sha256)
                ]
            })
    }

    /// Whether any file of `build` is recorded.
    func hasBuildFiles(build: String) throws(PatchSyncError) -> Bool {
        !(try database.query("SELECT 1 FROM build_file WHERE build = ? LIMIT 1", [.text(build)])).isEmpty
    }

    /// A deployment's files with what the stat cache remembers of each (nil where it has nothing), in one query.
    func buildFiles(build: String) throws(PatchSyncError) -> [(BuildFile, FileStat?)] {
        var files: [(BuildFile, FileStat?)] = []
        try forEachBuildFile(build: build) { files.append(($0, $1)) }
        return files
    }

    /// Hands `body` each of a deployment's files with what the stat cache remembers of it, in path order,
    /// a page of rows at a time (flat memory at a million files; no read stays open while `body` hashes
    /// for hours, so the journal of a sync committing meanwhile can be checkpointed). Returns how many.
    @discardableResult
    func forEachBuildFile(
        build: String, _ body: (BuildFile, FileStat?) throws(PatchSyncError) -> Void
    ) throws(PatchSyncError) -> Int {
        var count = 0, after = ""
        while true {
            let rows = try database.query(
                """
                SELECT b.path, b.size, b.mode, b.sha256, s.size, s.mtime_ns, s.inode FROM build_file b
                LEFT JOIN stat_cache s ON s.build = b.build AND s.path = b.path WHERE b.build = ? AND b.path > ?
                ORDER BY b.path LIMIT \(Self.filesPerPage)
                """, [.text(build), .text(after)])
            for row in rows {
                guard let path = row[0].text, let size = row[1].integer, let mode = row[2].integer,
                    let sha = row[3].text
                else { continue }
                let cached = row[4].integer.flatMap { size in
                    row[5].integer.flatMap { mtime in
                        row[6].integer.map { FileStat(size: size, modifiedNanoseconds: mtime, inode: $0) }
                    }
                }
                count += 1
                try body(BuildFile(path: path, size: size, mode: UInt32(mode), sha256: sha), cached)
            }
            guard rows.count == Self.filesPerPage, let last = rows.last?[0].text else { return count }
            after = last
        }
    }

    /// Rows a page of ``forEachBuildFile(build:_:)`` reads.
    static let filesPerPage = 4096

    /// Forgets the stat cache and file lists of deployments not in `keep`.
    func forgetBuilds(except keep: Set<String>) throws(PatchSyncError) {
        try database.transaction { (t) throws(PatchSyncError) in
            // The distinct builds by one index seek each (a skip scan), not a scan of every file's row:
            // an up-to-date sync runs this, and must not cost more at a million files.
            let distinct = { (table: String) in
                """
                WITH RECURSIVE b(build) AS (SELECT MIN(build) FROM \(table) UNION ALL
                    SELECT (SELECT MIN(build) FROM \(table) WHERE build > b.build) FROM b WHERE b.build IS NOT NULL)
                SELECT build FROM b WHERE build IS NOT NULL
                """
            }
            let builds = try t.query(distinct("stat_cache")) + t.query(distinct("build_file"))
            for build in builds.compactMap({ $0.first?.text }) where !keep.contains(build) {
                try t.run("DELETE FROM stat_cache WHERE build = ?", rows: [[.text(build)]])
                try t.run("DELETE FROM build_file WHERE build = ?", rows: [[.text(build)]])
            }
        }
    }

    // MARK: resume records of the staged deployment

    /// The resume records of `deployment`.
    func chunkRecords(_ deployment: String) throws(PatchSyncError) -> [ChunkRecord] {
        try database.query(
            "SELECT path, chunk, sha256, inode FROM staged_chunk WHERE deployment = ?",
            [.text(deployment)]
        ).compactMap { row in
            guard let path = row[0].text, let index = row[1].integer, let sha = row[2].text, let inode = row[3].integer
            else { return nil }
            return ChunkRecord(ref: ChunkRef(path: path, index: Int(index)), sha256: sha, inode: inode)
        }
    }

    /// Records chunks as written and verified, and the stamps of their files taken after they were
    /// synced, in one transaction; call only after their bytes are durable.
    func recordDone(_ deployment: String, _ records: [ChunkRecord], stamps: [FileStamp] = []) throws(PatchSyncError) {
        guard !records.isEmpty else { return }
        try database.transaction { (t) throws(PatchSyncError) in
            try t.run(
                "INSERT OR REPLACE INTO staged_chunk(deployment, path, chunk, sha256, inode) VALUES(?, ?, ?, ?, ?)",
                rows: records.map {
                    [
                        .text(deployment), .text($0.ref.path), .integer(Int64($0.ref.index)),
                        .text($0.sha256), .integer($0.inode)
                    ]
                })
            guard !stamps.isEmpty else { return }
            try t.run(
                "INSERT OR REPLACE INTO staged_stamp(deployment, path, inode, size, mtime_ns, ctime_ns, boot) VALUES(?, ?, ?, ?, ?, ?, ?)",
                rows: stamps.map {
                    [
                        .text(deployment), .text($0.path), .integer($0.inode), .integer($0.size),
                        .integer($0.modifiedNanoseconds), .integer($0.changedNanoseconds), .text($0.boot)
                    ]
                })
        }
    }

    /// The staged files' stamps as of their last flush, by path.
    func fileStamps(_ deployment: String) throws(PatchSyncError) -> [String: FileStamp] {
        let rows = try database.query(
            "SELECT path, inode, size, mtime_ns, ctime_ns, boot FROM staged_stamp WHERE deployment = ?",
            [.text(deployment)])
        var stamps: [String: FileStamp] = [:]
        for row in rows {
            guard let path = row[0].text, let inode = row[1].integer, let size = row[2].integer,
                let modified = row[3].integer, let changed = row[4].integer, let boot = row[5].text
            else { continue }
            stamps[path] = FileStamp(
                path: path, inode: inode, size: size, modifiedNanoseconds: modified, changedNanoseconds: changed,
                boot: boot)
        }
        return stamps
    }

    /// Drops every resume record of a deployment (its chunks and stamps): nothing staged so far is trusted.
    func forgetRecords(_ deployment: String) throws(PatchSyncError) {
        try database.transaction { (t) throws(PatchSyncError) in
            for table in ["staged_chunk", "staged_stamp"] {
                try t.run("DELETE FROM \(table) WHERE deployment = ?", rows: [[.text(deployment)]])
            }
        }
    }

    /// Drops resume records that no longer vouch for anything.
    func forgetChunks(_ deployment: String, _ refs: [ChunkRef]) throws(PatchSyncError) {
        guard !refs.isEmpty else { return }
        try database.run(
            "DELETE FROM staged_chunk WHERE deployment = ? AND path = ? AND chunk = ?",
            rows: refs.map { [.text(deployment), .text($0.path), .integer(Int64($0.index))] })
    }
}
