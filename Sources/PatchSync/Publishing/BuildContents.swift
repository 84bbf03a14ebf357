import Foundation

/// The files of an origin that one listed build needs, as paths relative to the origin: its manifest,
/// the objects and packs its files name, its delta packs and its manifest deltas. What `repo prune`
/// keeps, and what `upload` knows a bucket has once it lists the build.
enum BuildContents {
    static func paths(in origin: String, target path: String, _ file: TargetFile) throws(PatchSyncError) -> Set<String>
    {
        guard let hash = file.hashes["sha256"] else {
            throw PatchSyncError(.refusedData, "target \(path) of \(origin) has no sha256")
        }
        var paths: Set<String> = [OriginLayout.targetFile(path, sha256: hash)]
        if file.custom == nil, file.channelRecord != nil { return paths }  // a channel's record: the file alone
        for delta in file.custom?.manifestDeltas ?? [] { paths.insert(OriginLayout.object(hex: delta.object)) }
        if file.custom?.preload != nil {  // its plan names every object it needs, sealed or shared
            let plan = try Repository.plan(in: origin, path, file)
            paths.insert(OriginLayout.object(plan.manifest.sealed))
            for object in plan.objects { paths.insert(OriginLayout.object(object.sealed)) }
            for object in plan.sharedObjects { paths.insert(OriginLayout.object(object)) }
            return paths
        }
        // Read without the clients' validation: what a manifest clients refuse names is kept all the same.
        let manifest = try Repository.manifest(in: origin, path, file, validating: false)
        let naming = ObjectNaming(format: manifest.formatVersion)
        // A sealed object's plain name is never a file (its sealed object is, listed in `sealed`).
        let sealed = Set((manifest.sealed ?? []).map(\.object))
        for entry in manifest.files where !entry.chunks.isEmpty && !sealed.contains(entry.object) {
            paths.formUnion(naming.paths(of: entry))
        }
        for delta in manifest.deltas ?? [] { paths.insert(naming.path(delta.object)) }
        for object in manifest.sealed ?? [] { paths.insert(naming.path(object.sealed)) }
        return paths
    }

    /// The released content keys (targets of the releases role), relative to the origin: every player
    /// unlocking a preload build later reads them.
    static func releasedKeys(of repo: Repository) -> Set<String> {
        Set(
            repo.releasedKeys.compactMap { path, file in
                file.hashes["sha256"].map { OriginLayout.targetFile(path, sha256: $0) }
            })
    }

    /// ``paths(in:target:_:)`` remembered by manifest, for a caller that asks about the same builds twice.
    struct Memo {
        private var known: [String: Set<String>] = [:]

        mutating func paths(in origin: String, target path: String, _ file: TargetFile) throws(PatchSyncError) -> Set<
            String
        > {
            let key = path + "#" + (file.hashes["sha256"] ?? "")
            if let paths = known[key] { return paths }
            let paths = try BuildContents.paths(in: origin, target: path, file)
            known[key] = paths
            return paths
        }
    }

    /// The files of the folders a client reads (objects/, targets/, metadata/), relative to the origin,
    /// with their sizes; names starting with a dot (objects/.incoming) and unfinished writes (`*.tmp-PID`)
    /// are left out.
    static func files(of origin: String) throws(PatchSyncError) -> [(path: String, bytes: Int64)] {
        let layout = OriginLayout(root: origin)
        var found: [(String, Int64)] = []
        func walk(_ folder: String) throws(Errno) {
            guard let st = try FileSystem.status(layout.path(folder)), (st.st_mode & S_IFMT) == S_IFDIR else { return }
            for name in try FileSystem.list(layout.path(folder)) where OriginLayout.isServed(name: name) {
                let path = folder + "/" + name
                guard let entry = try FileSystem.status(layout.path(path)) else { continue }
                switch entry.st_mode & S_IFMT {
                case S_IFDIR: try walk(path)
                case S_IFREG: found.append((path, Int64(entry.st_size)))
                default: continue
                }
            }
        }
        do { for folder in OriginLayout.servedFolders { try walk(folder) } } catch {
            throw PatchSyncError.wrap(error).during("listing \(origin)")
        }
        return found
    }
}
