import Foundation

/// What staging one build takes: per file, link it from the live tree, copy
/// chunks that exist locally, or fetch the rest (each needed chunk once).
struct Plan: Sendable {
    /// A file whose exact content is in the live tree: hard-link it.
    struct Link: Sendable {
        var path: String
        var source: String
    }

    /// Where one chunk's bytes go in the staged build.
    struct Destination: Hashable, Sendable {
        var path: String
        var index: Int
        var offset: Int64
    }

    /// One distinct chunk the staged build still needs, and every place it goes.
    struct Need: Sendable {
        var chunk: ChunkEntry
        var object: SHA256Digest
        var destinations: [Destination]
        /// Lower sorts first: required bundles, then optional ones by priority, then in the bundles file's order.
        var rank: Int
    }

    /// What a staged file may take from a live one by a hard link: the same bytes and the same mode.
    struct Content: Hashable, Sendable {
        var sha256: SHA256Digest
        var mode: UInt32

        init(_ file: FileEntry) {
            sha256 = file.sha256
            mode = Plan.installedMode(file.mode)
        }

        /// Bytes `sha256` with `mode` as installed (read-only).
        init(sha256: SHA256Digest, mode: UInt32) {
            self.sha256 = sha256
            self.mode = Plan.installedMode(mode)
        }
    }

    /// A chunk available in a verified live file.
    struct LocalChunk: Sendable {
        var path: String
        var offset: Int64
    }

    var links: [Link] = []
    /// Files assembled from chunks (created at their size, written in place).
    var assembled: [FileEntry] = []
    var local: [(Need, LocalChunk)] = []
    var fetch: [Need] = []
    /// The chunks already written and verified, which the plan leaves out.
    var done: Set<StateStore.ChunkRef> = []

    /// Bytes the staged files still need on disk: every chunk not yet written, once per destination.
    var bytesToWrite: Int64 {
        (fetch + local.map(\.0)).reduce(0) { $0 + Int64($1.chunk.length) * Int64($1.destinations.count) }
    }

    /// Compressed bytes to fetch, as the manifest states them.
    var bytesToFetch: Int64 { fetch.reduce(0) { $0 + Int64($1.chunk.objectLength) } }
}

extension Plan {
    /// Plans `manifest` against the verified live files (content and mode → absolute path)
    /// and the chunks already recorded done. With `pending`, only those of its files are planned (the
    /// others are in place already, in a recycled folder, and need nothing).
    init(
        manifest: Manifest, live: [Content: String], liveChunks: [SHA256Digest: LocalChunk],
        done: Set<StateStore.ChunkRef>, pending: [FileEntry]? = nil
    ) {
        self.done = done
        let ranks = BundleSelection.ranks(manifest.bundles)
        var needs: [SHA256Digest: Need] = [:]
        var order: [SHA256Digest] = []
        for file in pending ?? manifest.files {
            if let source = live[Content(file)] {
                links.append(Link(path: file.path, source: source))
                continue
            }
            assembled.append(file)
            for (index, chunk) in file.chunks.enumerated()
            where !done.contains(StateStore.ChunkRef(path: file.path, index: index)) {
                let destination = Destination(path: file.path, index: index, offset: chunk.offset)
                if needs[chunk.sha256] == nil { order.append(chunk.sha256) }
                needs[
                    chunk.sha256,
                    default: Need(
                        chunk: chunk, object: chunk.object(in: file), destinations: [], rank: ranks[file.bundle] ?? 0)
                ]
                .destinations.append(destination)
            }
        }
        for sha in order {
            guard let need = needs[sha] else { continue }
            if let local = liveChunks[sha] { self.local.append((need, local)) } else { fetch.append(need) }
        }
    }

    /// The fetches grouped into range requests: per object, chunks in object order,
    /// neighbours (up to `gap` bytes apart) coalesced, at most `maxBytes` a request;
    /// never across two segments of an object (``ObjectNaming``); ordered by bundle rank.
    func requests(gap: Int64, maxBytes: Int64, naming: ObjectNaming = .current) -> [[Need]] {
        let byObject = Dictionary(grouping: fetch, by: \.object)
        var requests: [[Need]] = []
        for (_, needs) in byObject.sorted(by: { $0.key < $1.key }) {
            let sorted = needs.sorted { $0.chunk.objectOffset < $1.chunk.objectOffset }
            var current: [Need] = []
            for need in sorted {
                if let first = current.first, let last = current.last {
                    let end = last.chunk.objectOffset + Int64(last.chunk.objectLength)
                    let span = need.chunk.objectOffset + Int64(need.chunk.objectLength) - first.chunk.objectOffset
                    if need.chunk.objectOffset - end > gap || span > maxBytes || need.chunk.objectOffset < end
                        || naming.segment(of: need.chunk.objectOffset) != naming.segment(of: first.chunk.objectOffset)
                    {
                        requests.append(current)
                        current = []
                    }
                }
                current.append(need)
            }
            if !current.isEmpty { requests.append(current) }
        }
        return requests.sorted { ($0.map(\.rank).min() ?? 0) < ($1.map(\.rank).min() ?? 0) }
    }
}
