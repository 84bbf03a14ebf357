import Foundation

/// The one planner of an update: what a machine holding `local` (the verified live build, the ready tree
/// and the kept builds) links, rebuilds from a delta pack, copies and fetches to have a manifest. A sync
/// stages by it; `diff` and publish's dry run cost a patch by it, so what they predict is what a sync does.
struct UpdatePlan: Sendable {
    /// A delta pack the update fetches whole, and the files it rebuilds.
    struct DeltaRoute: Sendable {
        var pack: DeltaSource
        /// Target file index → the file, and a local file with the content the pack's instructions start from.
        var files: [Int: (FileEntry, String)]

        var paths: Set<String> { Set(files.values.map(\.0.path)) }
    }

    /// Links, local chunks and fetches (``Plan``).
    var plan: Plan
    /// The delta pack from the live build, when it rebuilds any file this plan still writes.
    var delta: DeltaRoute?

    /// Plans `manifest` against `local`, leaving out the chunks `done`. The delta pack is the manifest's
    /// from the live build (`local.manifest`), or `pack` when given (one a publish would write).
    init(
        manifest: Manifest, local: LiveTree, done: Set<StateStore.ChunkRef> = [], pack: DeltaSource? = nil,
        pending: [FileEntry]? = nil
    ) {
        plan = Plan(
            manifest: manifest, live: local.linkable, liveChunks: local.chunks, done: done, pending: pending)
        delta = Self.deltaRoute(manifest, plan: plan, local: local, pack: pack)
    }

    /// The files of `plan` that the delta pack from the live build can rebuild: each file staging still
    /// writes that the pack covers and whose path held, in the live build, content found verified in
    /// `local`, with a chunk not yet written. Nil when there is no pack or it rebuilds nothing here.
    static func deltaRoute(_ manifest: Manifest, plan: Plan, local: LiveTree, pack given: DeltaSource? = nil)
        -> DeltaRoute?
    {
        guard let source = local.manifest,
            let pack = given ?? manifest.deltas?.first(where: { $0.from == source.buildId })
        else { return nil }
        // What each path held in the live build: its content, read where a verified live file has it.
        let before = Dictionary(source.files.map { ($0.path, Plan.Content($0)) }, uniquingKeysWith: { a, _ in a })
        let assembled = Set(plan.assembled.map(\.path))
        // The files the pack rebuilds, when the manifest says (format 6): the others' chunks are fetched.
        let covers = pack.covers.map(Set.init)
        var files: [Int: (FileEntry, String)] = [:]
        for (index, file) in manifest.files.enumerated()
        where assembled.contains(file.path) && covers?.contains(index) != false {
            guard let content = before[pack.moved?[file.path] ?? file.path], let path = local.linkable[content],
                file.chunks.indices.contains(where: { !plan.done.contains(.init(path: file.path, index: $0)) })
            else { continue }
            files[index] = (file, path)
        }
        return files.isEmpty ? nil : DeltaRoute(pack: pack, files: files)
    }

    /// The compressed bytes the update downloads: the delta pack whole, and every chunk to fetch that a
    /// file the pack does not rebuild needs (each distinct chunk once).
    var downloadBytes: Int64 {
        guard let delta else { return plan.bytesToFetch }
        return delta.pack.length + Self.chunkBytes(plan, besides: delta.paths)
    }

    /// The object bytes of `plan`'s chunks that some file outside `covered` needs.
    static func chunkBytes(_ plan: Plan, besides covered: Set<String>) -> Int64 {
        plan.fetch.filter { !$0.destinations.allSatisfy { covered.contains($0.path) } }
            .reduce(Int64(0)) { $0 + Int64($1.chunk.objectLength) }
    }
}

extension LiveTree {
    /// What a machine holding exactly the builds of `manifests` has, every file taken as present and whole
    /// (paths are the manifests' own): how diff and a publish's dry run see a player on those builds.
    /// The first manifest is the live build, the source of its delta packs.
    init(holding manifests: [Manifest]) {
        manifest = manifests.first
        for held in manifests {
            for file in held.files {
                if linkable[Plan.Content(file)] == nil { linkable[Plan.Content(file)] = file.path }
                for chunk in file.chunks where chunks[chunk.sha256] == nil {
                    chunks[chunk.sha256] = Plan.LocalChunk(path: file.path, offset: chunk.offset)
                }
            }
        }
    }
}
