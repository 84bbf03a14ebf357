import Foundation

/// The agent's state in `.patchsync/state.db`: settings (current, previous,
/// ready build; highest sequence seen), the stat cache of installed files,
/// and the chunks of the staged build that are written and verified.
///
/// Thread-safety: all access goes through one ``Database`` connection, which serialises calls.
final class StateStore: Sendable {
    let database: Database

    /// A destination of a chunk in the staged build: file path and chunk index.
    struct ChunkRef: Hashable, Sendable {
        var path: String
        var index: Int
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
            try database.execute("""
                CREATE TABLE IF NOT EXISTS setting(key TEXT PRIMARY KEY, value TEXT NOT NULL);
                CREATE TABLE IF NOT EXISTS stat_cache(build TEXT NOT NULL, path TEXT NOT NULL, size INTEGER NOT NULL,
                    mtime_ns INTEGER NOT NULL, inode INTEGER NOT NULL, PRIMARY KEY(build, path));
                CREATE TABLE IF NOT EXISTS build_file(build TEXT NOT NULL, path TEXT NOT NULL, size INTEGER NOT NULL,
                    mode INTEGER NOT NULL, sha256 TEXT NOT NULL, PRIMARY KEY(build, path));
                CREATE TABLE IF NOT EXISTS chunk_done(build TEXT NOT NULL, path TEXT NOT NULL, chunk INTEGER NOT NULL,
                    PRIMARY KEY(build, path, chunk));
                """)
        }
    }

    func setting(_ key: String) throws(PatchSyncError) -> String? {
        try database.query("SELECT value FROM setting WHERE key = ?", [.text(key)]).first?.first?.text
    }

    /// Sets (or with nil removes) several settings in one transaction.
    func set(_ values: [String: String?]) throws(PatchSyncError) {
        for (key, value) in values where value == nil {
            try database.run("DELETE FROM setting WHERE key = ?", rows: [[.text(key)]])
        }
        let rows = values.compactMap { key, value in value.map { [Database.Value.text(key), .text($0)] } }
        if !rows.isEmpty {
            try database.run("INSERT OR REPLACE INTO setting(key, value) VALUES(?, ?)", rows: rows)
        }
    }

    func statCache(build: String) throws(PatchSyncError) -> [String: FileStat] {
        var cache: [String: FileStat] = [:]
        for row in try database.query("SELECT path, size, mtime_ns, inode FROM stat_cache WHERE build = ?",
                                      [.text(build)]) {
            guard let path = row[0].text, let size = row[1].integer, let mtime = row[2].integer,
                  let inode = row[3].integer else { continue }
            cache[path] = FileStat(size: size, modifiedNanoseconds: mtime, inode: inode)
        }
        return cache
    }

    func saveStatCache(build: String, _ entries: [String: FileStat]) throws(PatchSyncError) {
        try database.run("""
            INSERT OR REPLACE INTO stat_cache(build, path, size, mtime_ns, inode) VALUES(?, ?, ?, ?, ?)
            """, rows: entries.map { path, s in
                [.text(build), .text(path), .integer(s.size), .integer(s.modifiedNanoseconds), .integer(s.inode)]
            })
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
        try database.run("INSERT OR REPLACE INTO build_file(build, path, size, mode, sha256) VALUES(?, ?, ?, ?, ?)",
                         rows: files.map { [.text(build), .text($0.path), .integer($0.size), .integer(Int64($0.mode)),
                                            .text($0.sha256)] })
    }

    /// A deployment's files with what the stat cache remembers of each (nil where it has nothing), in one query.
    func buildFiles(build: String) throws(PatchSyncError) -> [(BuildFile, FileStat?)] {
        try database.query("""
            SELECT b.path, b.size, b.mode, b.sha256, s.size, s.mtime_ns, s.inode FROM build_file b
            LEFT JOIN stat_cache s ON s.build = b.build AND s.path = b.path WHERE b.build = ?
            """, [.text(build)]).compactMap { row in
            guard let path = row[0].text, let size = row[1].integer, let mode = row[2].integer, let sha = row[3].text
            else { return nil }
            let cached = row[4].integer.flatMap { size in
                row[5].integer.flatMap { mtime in row[6].integer.map { FileStat(size: size, modifiedNanoseconds: mtime, inode: $0) } }
            }
            return (BuildFile(path: path, size: size, mode: UInt32(mode), sha256: sha), cached)
        }
    }

    func doneChunks(build: String) throws(PatchSyncError) -> Set<ChunkRef> {
        var done = Set<ChunkRef>()
        for row in try database.query("SELECT path, chunk FROM chunk_done WHERE build = ?", [.text(build)]) {
            if let path = row[0].text, let index = row[1].integer { done.insert(ChunkRef(path: path, index: Int(index))) }
        }
        return done
    }

    /// Records chunks as written and verified; call only after their bytes are durable.
    func recordDone(build: String, _ chunks: [ChunkRef]) throws(PatchSyncError) {
        guard !chunks.isEmpty else { return }
        try database.run("INSERT OR IGNORE INTO chunk_done(build, path, chunk) VALUES(?, ?, ?)",
                         rows: chunks.map { [.text(build), .text($0.path), .integer(Int64($0.index))] })
    }

    /// Forgets staging progress and stat cache rows of builds not in `keep`.
    func forgetBuilds(except keep: Set<String>) throws(PatchSyncError) {
        let builds = try database.query("""
            SELECT DISTINCT build FROM chunk_done UNION SELECT DISTINCT build FROM stat_cache
            UNION SELECT DISTINCT build FROM build_file
            """)
        for build in builds.compactMap({ $0.first?.text }) where !keep.contains(build) {
            try database.run("DELETE FROM chunk_done WHERE build = ?", rows: [[.text(build)]])
            try database.run("DELETE FROM stat_cache WHERE build = ?", rows: [[.text(build)]])
            try database.run("DELETE FROM build_file WHERE build = ?", rows: [[.text(build)]])
        }
    }
}
