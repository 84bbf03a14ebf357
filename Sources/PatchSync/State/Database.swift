internal import CSQLite3
import Foundation

/// One SQLite connection.
///
/// Thread-safety: every call takes `lock`, so one connection is used by one
/// thread at a time; the install's single writer is whoever owns this value.
final class Database: @unchecked Sendable {
    private let handle: OpaquePointer
    private let lock = NSLock()
    let path: String

    /// sqlite3_open_v2, then WAL mode and a busy timeout for readers in other processes.
    init(path: String, readOnly: Bool = false) throws(PatchSyncError) {
        var db: OpaquePointer?
        let flags = readOnly ? SQLITE_OPEN_READONLY : (SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE)
        let status = sqlite3_open_v2(path, &db, flags | SQLITE_OPEN_FULLMUTEX, nil)
        guard status == SQLITE_OK, let db else {
            let message = db.map { String(cString: sqlite3_errmsg($0)) } ?? "status \(status)"
            sqlite3_close(db)
            throw PatchSyncError(.localIO, "opening the state database \(path): \(message)")
        }
        handle = db
        self.path = path
        sqlite3_busy_timeout(db, 10_000)
        if !readOnly {
            try execute("PRAGMA journal_mode=WAL")
            // FULL: a commit is on disk when it returns (the sequence seen, the state's transitions and the
            // chunk records guard against rollback and loss; a lost commit would undo one).
            try execute("PRAGMA synchronous=FULL")
        }
    }

    deinit { sqlite3_close(handle) }

    /// sqlite3_exec of statements without results.
    func execute(_ sql: String) throws(PatchSyncError) {
        lock.lock()
        defer { lock.unlock() }
        guard sqlite3_exec(handle, sql, nil, nil, nil) == SQLITE_OK else { throw failure(sql) }
    }

    /// Runs `sql` once per row of `rows`, all in one transaction.
    func run(_ sql: String, rows: [[Value]]) throws(PatchSyncError) {
        try transaction { (t) throws(PatchSyncError) in try t.run(sql, rows: rows) }
    }

    /// Runs a query and returns every row.
    func query(_ sql: String, _ arguments: [Value] = []) throws(PatchSyncError) -> [[Value]] {
        lock.lock()
        defer { lock.unlock() }
        return try unlockedQuery(sql, arguments)
    }

    /// Runs `body` in one write transaction (BEGIN IMMEDIATE … COMMIT): everything it does is on disk
    /// together, or none of it (ROLLBACK when it throws).
    func transaction<T>(_ body: (Transaction) throws(PatchSyncError) -> T) throws(PatchSyncError) -> T {
        lock.lock()
        defer { lock.unlock() }
        guard sqlite3_exec(handle, "BEGIN IMMEDIATE", nil, nil, nil) == SQLITE_OK else { throw failure("BEGIN") }
        do throws(PatchSyncError) {
            let result = try body(Transaction(database: self))
            guard sqlite3_exec(handle, "COMMIT", nil, nil, nil) == SQLITE_OK else { throw failure("COMMIT") }
            return result
        } catch {
            sqlite3_exec(handle, "ROLLBACK", nil, nil, nil)
            throw error
        }
    }

    /// The statements of one open transaction; valid only inside ``transaction(_:)``'s body.
    struct Transaction {
        fileprivate let database: Database

        func query(_ sql: String, _ arguments: [Value] = []) throws(PatchSyncError) -> [[Value]] {
            try database.unlockedQuery(sql, arguments)
        }

        /// Runs `sql` once per row of `rows` (a lazy sequence makes one row at a time: no table of a
        /// million rows in memory).
        func run(_ sql: String, rows: some Sequence<[Value]> = [[]]) throws(PatchSyncError) {
            let statement = try database.prepare(sql)
            defer { sqlite3_finalize(statement) }
            for row in rows {
                try database.bind(row, to: statement)
                guard sqlite3_step(statement) == SQLITE_DONE else { throw database.failure(sql) }
                sqlite3_reset(statement)
            }
        }
    }

    /// A query on the caller's lock.
    private func unlockedQuery(_ sql: String, _ arguments: [Value]) throws(PatchSyncError) -> [[Value]] {
        let statement = try prepare(sql)
        defer { sqlite3_finalize(statement) }
        try bind(arguments, to: statement)
        var rows: [[Value]] = []
        while true {
            let status = sqlite3_step(statement)
            if status == SQLITE_DONE { return rows }
            guard status == SQLITE_ROW else { throw failure(sql) }
            rows.append((0..<sqlite3_column_count(statement)).map { column(statement, $0) })
        }
    }

    /// A bound value or a column's value.
    enum Value: Hashable, Sendable {
        case integer(Int64)
        case text(String)
        case null

        var integer: Int64? {
            if case .integer(let i) = self { return i }
            return nil
        }
        var text: String? {
            if case .text(let s) = self { return s }
            return nil
        }
    }

    fileprivate func prepare(_ sql: String) throws(PatchSyncError) -> OpaquePointer {
        var statement: OpaquePointer?
        guard sqlite3_prepare_v2(handle, sql, -1, &statement, nil) == SQLITE_OK, let statement else {
            throw failure(sql)
        }
        return statement
    }

    fileprivate func bind(_ values: [Value], to statement: OpaquePointer) throws(PatchSyncError) {
        let transient = unsafeBitCast(-1, to: sqlite3_destructor_type.self)
        for (i, value) in values.enumerated() {
            let index = Int32(i + 1)
            let status: Int32
            switch value {
            case .integer(let n): status = sqlite3_bind_int64(statement, index, n)
            case .text(let s): status = sqlite3_bind_text(statement, index, s, -1, transient)
            case .null: status = sqlite3_bind_null(statement, index)
            }
            guard status == SQLITE_OK else { throw failure("binding argument \(index)") }
        }
    }

    private func column(_ statement: OpaquePointer, _ index: Int32) -> Value {
        switch sqlite3_column_type(statement, index) {
        case SQLITE_INTEGER: return .integer(sqlite3_column_int64(statement, index))
        case SQLITE_NULL: return .null
        default:
            guard let text = sqlite3_column_text(statement, index) else { return .null }
            return .text(String(cString: text))
        }
    }

    fileprivate func failure(_ what: String) -> PatchSyncError {
        let message = String(cString: sqlite3_errmsg(handle))
        let code = sqlite3_errcode(handle)
        if code == SQLITE_FULL {
            var error = PatchSyncError(
                .localIO, "the disk holding \(path) is full",
                remedy: "free disk space, then run again; the live build is untouched and progress is kept",
                reason: .diskFull)
            error.availableBytes = FileSystem.freeBytes(at: path)
            return error
        }
        return PatchSyncError(
            .localIO, "state database \(path): \(message) (in \(what.prefix(60)))",
            remedy: "check the disk holding \(path), then run again; the live build is untouched")
    }
}
