import Foundation
import Synchronization

/// The chunk layouts of the objects already in an origin, from the manifests that describe them.
///
/// An object is named by its file's SHA-256 alone, so content published before keeps the layout its
/// object was written with, whatever this publish's chunking: a new manifest must describe the bytes
/// that are there. Reading every manifest on every publish would grow with the origin's history, so
/// the newest manifest of each channel is read at once and older ones only when an object exists that
/// none of those describes (content coming back from an older build, or a leftover).
///
/// Thread-safety: `state` guards everything; a lookup that has to read older manifests holds it
/// meanwhile (rare, and the other workers would need the same manifests).
final class KnownLayouts: Sendable {
    /// Reads a published manifest; nil when it cannot be used (skipped, as the loader reports).
    typealias Loader = @Sendable (String, TargetFile) throws(PatchSyncError) -> Manifest?

    private struct State: ~Copyable {
        var layouts: [SHA256Digest: FileEntry] = [:]
        /// Where each chunk is stored (its entry with `object` set), when ``indexesChunks``.
        var chunks: [SHA256Digest: ChunkEntry] = [:]
        /// Manifests not read yet, newest first.
        var unread: [(String, TargetFile)] = []
        /// How many manifests have been read (for tests and reports).
        var read = 0
    }

    private let state: Mutex<State>
    private let load: Loader
    /// True when the origin has no manifest at all: every object in it is a leftover.
    let isEmpty: Bool
    /// Whether the chunks of the manifests read are indexed (``storedChunk(_:)``).
    private let indexesChunks: Bool

    /// Reads the newest manifest (by sequence) of each channel among `targets`, and `first` (the target
    /// being published again, whose content is all in the origin already) before them.
    /// `recovered`: layouts of objects a publish killed before its manifest stored (``LayoutJournal``),
    /// used where no manifest describes the content.
    init(
        targets: [String: TargetFile], first: String? = nil, recovered: [SHA256Digest: FileEntry] = [:],
        indexingChunks: Bool = false, load: @escaping Loader
    ) throws(PatchSyncError) {
        indexesChunks = indexingChunks
        let manifests = targets.compactMap { path, target in target.custom.map { (path, target, $0) } }
            .sorted { ($0.2.sequence, $0.0) > ($1.2.sequence, $1.0) }
        var newest: [(String, TargetFile)] = [], older: [(String, TargetFile)] = []
        var channels = Set<String>()
        for (path, target, info) in manifests {
            if path == first { continue }
            if channels.insert(info.channel).inserted {
                newest.append((path, target))
            } else {
                older.append((path, target))
            }
        }
        if let first, let target = targets[first] { newest.insert((first, target), at: 0) }
        var state = State(unread: older)
        for (path, target) in newest {
            if let manifest = try load(path, target) { Self.add(manifest, to: &state, indexingChunks: indexingChunks) }
        }
        for (sha, file) in recovered where state.layouts[sha] == nil { state.layouts[sha] = file }
        self.state = Mutex(state)
        self.load = load
        isEmpty = manifests.isEmpty && recovered.isEmpty
    }

    /// The layout (object and chunks) a manifest in the origin gives content `sha`: from the manifests
    /// read so far, and when `readingOlder`, from older ones read until one describes it; nil when none does.
    /// Content in a pack of an older build only is packed again rather than read for: the caller asks for
    /// older manifests only when an object of the content's own name exists.
    func layout(of sha: SHA256Digest, readingOlder: Bool = true) throws(PatchSyncError) -> FileEntry? {
        let found = state.withLock { state -> Result<FileEntry?, PatchSyncError> in
            while readingOlder, state.layouts[sha] == nil, !state.unread.isEmpty {
                let (path, target) = state.unread.removeFirst()
                do throws(PatchSyncError) {
                    if let manifest = try load(path, target) {
                        Self.add(manifest, to: &state, indexingChunks: indexesChunks)
                    }
                } catch { return .failure(error) }
            }
            return .success(state.layouts[sha])
        }
        return try found.get()
    }

    /// Where chunk `sha` of a large file is stored, from the manifests read so far (its entry, `object`
    /// set); nil when none of them has it.
    func storedChunk(_ sha: SHA256Digest) -> ChunkEntry? { state.withLock { $0.chunks[sha] } }

    /// Whether any chunk is indexed yet (none: a first publish, where looking for stored chunks is wasted).
    var hasChunks: Bool { state.withLock { !$0.chunks.isEmpty } }

    /// How many manifests were read so far.
    var manifestsRead: Int { state.withLock { $0.read } }

    /// Only manifests that name objects as publish does now (``ObjectNaming``) describe the object files
    /// it would reuse: an older one's object is a file of another name.
    private static func add(_ manifest: Manifest, to state: inout State, indexingChunks: Bool) {
        state.read += 1
        guard ObjectNaming(format: manifest.formatVersion) == .current else { return }
        for file in manifest.files where state.layouts[file.sha256] == nil { state.layouts[file.sha256] = file }
        guard indexingChunks else { return }
        // A sealed object is never an origin file by its plain name: its chunks are not reused.
        let sealed = Set((manifest.sealed ?? []).map(\.object))
        for file in manifest.files where !file.objects.contains(where: sealed.contains) {
            for var chunk in file.chunks where state.chunks[chunk.sha256] == nil {
                chunk.object = chunk.object(in: file)
                chunk.offset = 0
                state.chunks[chunk.sha256] = chunk
            }
        }
    }
}
