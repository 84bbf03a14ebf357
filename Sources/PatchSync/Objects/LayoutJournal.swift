import Foundation
import Synchronization

/// What a publish has stored so far, so that a publish killed before its manifest leaves objects the
/// next publish reuses instead of writing them again.
///
/// Each object ``ObjectWriter`` finishes appends one line to `objects/.incoming/layouts-<pid>-<n>.jsonl`:
/// its temporary file, the file's SHA-256 and size, and the chunks as stored; each pack ``PackWriter``
/// finishes appends one line per file it holds (the pack's temporary file, name and length). The next publish holds the
/// origin's lock, so every journal it finds is from a publish that has ended: ``recover(origin:)`` reads
/// back each object the journal names (in place, or still a temporary file) and checks every chunk
/// against its hash, puts a temporary one in place (never over an existing object), and gives the
/// layouts to ``KnownLayouts``. A publish
/// that signs its manifest removes the journals (the manifest describes the objects then); `repo prune`
/// removes old ones with the other temporary files.
///
/// Thread-safety: `file` is written under its lock by the workers that store objects.
final class LayoutJournal: Sendable {
    struct Entry: Codable, Sendable {
        /// The temporary file, relative to `objects/.incoming`.
        var temp: String
        var sha256: SHA256Digest
        /// The object's name when it is not `sha256` (``ObjectWriter/layoutName(of:chunks:)``, or a pack's).
        var object: SHA256Digest?
        var size: Int64
        var chunks: [ChunkEntry]
        /// For a file in a pack of small files: the pack's length (its chunks sit at their offsets in it).
        var packLength: Int64?

        /// The length of the object file: the pack's, or what the chunks add up to.
        var storedLength: Int64 { packLength ?? chunks.reduce(0) { $0 + Int64($1.objectLength) } }
    }

    static let prefix = "layouts-"
    private let file: Mutex<FileDescriptor?>
    private let path: String

    /// A journal for this publish in `origin`; the file is made at the first entry.
    init(origin: String) {
        path =
            OriginLayout(root: origin).incomingFolder
            + "/\(Self.prefix)\(getpid())-\(UInt32.random(in: 0...UInt32.max)).jsonl"
        file = Mutex(nil)
    }

    /// Records a finished temporary object (any thread). A journal that cannot be written only costs
    /// the next publish after a kill the rewriting it would do anyway.
    func record(
        _ pending: ObjectWriter.Pending, sha256: SHA256Digest, object: SHA256Digest, size: Int64, chunks: [ChunkEntry],
        packLength: Int64? = nil
    ) {
        let entry = Entry(
            temp: String(pending.temp.dropFirst(FileSystem.parent(of: path).count + 1)), sha256: sha256,
            object: object == sha256 ? nil : object, size: size, chunks: chunks, packLength: packLength)
        guard var line = try? JSONEncoder().encode(entry) else { return }
        line.append(0x0a)
        file.withLock { file in
            if file == nil { file = try? FileDescriptor(path: path, flags: O_WRONLY | O_CREAT | O_APPEND, mode: 0o644) }
            try? file?.write([UInt8](line))
        }
    }

    /// Removes this publish's journal and every other one (its manifest is signed: what they recorded
    /// is described now, or a leftover like any other).
    func finish(origin: String) {
        file.withLock { $0 = nil }
        Self.removeAll(origin: origin)
    }

    static func removeAll(origin: String) {
        let folder = OriginLayout(root: origin).incomingFolder
        for name in (try? FileSystem.list(folder)) ?? [] where name.hasPrefix(prefix) {
            try? FileSystem.remove(folder + "/" + name)
        }
    }

    /// The layouts of the objects that journals of ended publishes recorded and that are whole: already
    /// in place with the length the chunks add up to, or a temporary file whose chunks read back with
    /// their hashes, which is then put in place (one syncfs for all). The journals stay until a publish
    /// signs its manifest.
    static func recover(origin: String) -> [SHA256Digest: FileEntry] {
        let layout = OriginLayout(root: origin)
        let folder = layout.incomingFolder
        var found: [SHA256Digest: FileEntry] = [:]
        var toPlace: [(temp: String, final: String, file: FileEntry)] = []
        var placing: Set<String> = []  // the finals of toPlace: a pack's files share one temporary file
        for name in (try? FileSystem.list(folder)) ?? [] where name.hasPrefix(prefix) && name.hasSuffix(".jsonl") {
            guard let data = try? FileSystem.read(folder + "/" + name, limit: 256 << 20) else { continue }
            for line in data.split(separator: 0x0a) {
                guard let entry = try? JSONDecoder().decode(Entry.self, from: Data(line)), found[entry.sha256] == nil,
                    !entry.temp.contains(".."), !entry.temp.hasPrefix("/"),
                    entry.chunks.last.map({ $0.offset + Int64($0.length) }) ?? 0 == entry.size,
                    entry.storedLength <= ObjectNaming.segmentBytes,
                    entry.chunks.allSatisfy({ $0.objectOffset + Int64($0.objectLength) <= entry.storedLength })
                else { continue }  // a line torn by the kill, one already seen, or one too large for one file
                let object = entry.object ?? entry.sha256
                let final = layout.objectFile(object), temp = folder + "/" + entry.temp
                let file = FileEntry(
                    path: "", size: entry.size, mode: 0o644, sha256: entry.sha256, object: object, bundle: "",
                    chunks: entry.chunks)
                // Every chunk is read back against its hash, in place or not: a length proves nothing after a crash.
                if FileSystem.exists(final) {
                    // Never replaced: an object in place may be one a manifest describes with another layout.
                    if let st = try? FileSystem.status(final), Int64(st.st_size) == entry.storedLength,
                        wholeChunks(final, file)
                    {
                        found[entry.sha256] = file
                    }
                } else if let st = try? FileSystem.status(temp), (st.st_mode & S_IFMT) == S_IFREG,
                    Int64(st.st_size) == entry.storedLength, wholeChunks(temp, file)
                {
                    if placing.insert(final).inserted { toPlace.append((temp, final, file)) }
                    found[entry.sha256] = file
                }
            }
        }
        guard !toPlace.isEmpty else { return found }
        // As ObjectPlacer does: the contents durable first, then the renames, then the renames durable.
        do { try FileSystem.syncFileSystem(of: layout.objectsFolder) } catch {
            for item in toPlace { found[item.file.sha256] = nil }
            return found
        }
        for item in toPlace {
            do {
                try FileSystem.makeDirectory(FileSystem.parent(of: item.final))
                try FileSystem.rename(item.temp, item.final)
            } catch {
                // Every file of that object (one, or a pack's) is written again.
                for (sha, file) in found where file.object == item.file.object { found[sha] = nil }
            }
        }
        try? FileSystem.syncFileSystem(of: layout.objectsFolder)
        return found
    }

    /// Whether every chunk of `file` reads back from `path` with its hash.
    private static func wholeChunks(_ path: String, _ file: FileEntry) -> Bool {
        StoredObject(path: path).isWhole(file)
    }
}
