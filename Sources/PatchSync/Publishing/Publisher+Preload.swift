import Foundation
import Synchronization

extension Publisher {
    /// What a preload publish reports: the release time, the key file, and what preloading costs a
    /// player on each recent build.
    public struct PreloadReport: Sendable, Codable {
        public var releaseAt: Date
        public var keyFile: String
        public var sealedObjects: Int
        public var sealedBytes: Int64
        /// Recent build → bytes a player with it whole preloads (every bundle): the sealed manifest and the
        /// route's ranges.
        public var routes: [String: Int64]
    }

    /// A preload publish's sealing: the build's content key, the folder its new plain objects are
    /// written to before they are sealed into the origin (beside the key, never in the origin), and
    /// the sealed objects of earlier preloads it may share.
    ///
    /// Thread-safety: the publish's workers ask ``reuse(_:)`` while the loader adds to what is known;
    /// a `Mutex` holds both maps.
    final class Sealing: Sendable {
        let key: ContentKey
        let keyFile: String
        let scratch: String
        private let known = Mutex<(sealed: [SHA256Digest: SealedObject], used: [SHA256Digest: SealedObject])>(
            ([:], [:]))
        private let counts = Mutex<(Int, Int64)>((0, 0))

        init(key: ContentKey, keyFile: String, scratch: String) {
            self.key = key
            self.keyFile = keyFile
            self.scratch = scratch
        }

        /// Records the sealed objects of an earlier preload's manifest of the same channel (a key is
        /// named by build within its channel).
        func learn(_ manifest: Manifest, channel: Channel) {
            guard manifest.channel == channel else { return }
            known.withLock { state in for object in manifest.sealed ?? [] { state.sealed[object.object] = object } }
        }

        /// Whether plain object `object` is sealed in an earlier preload: the new build then shares it.
        func reuse(_ object: SHA256Digest) -> Bool {
            known.withLock { state in
                guard let sealed = state.sealed[object] else { return false }
                state.used[object] = sealed
                return true
            }
        }

        var shared: [SHA256Digest: SealedObject] { known.withLock { $0.used } }
        var written: Int { counts.withLock { $0.0 } }
        var bytesWritten: Int64 { counts.withLock { $0.1 } }
        func count(_ object: SealedObject) {
            counts.withLock {
                $0.0 += 1
                $0.1 += object.length
            }
        }
    }

    /// Refuses a release time that has passed, and makes (or, for a publish run again, reads) the
    /// build's content key, written 0600 before any content is sealed with it.
    func prepareSealing(_ preload: Preload, repo: Repository) throws(PatchSyncError) -> Sealing {
        guard preload.releaseAt > options.now else {
            throw PatchSyncError(
                .refusedData,
                "the release time \(Repository.day(preload.releaseAt)) has passed (it is "
                    + "\(Repository.day(options.now)) now): a preload must be released later",
                remedy: "give a --release-at in the future, or publish without --release-at for a build "
                    + "that is released at once")
        }
        let build = options.buildId.value, channel = options.channel.name
        guard !repo.isReleased(channel: channel, build: build) else {
            throw PatchSyncError(
                .usage, "build \(build) of \(channel) was released before: its content key is public",
                remedy: "give the preload a new --build-id")
        }
        let keyFile = Repository.contentKeyPath(preload.contentKeys, channel: channel, build: build)
        let target = Manifest.targetPath(channel: options.channel, buildId: options.buildId)
        let key: ContentKey
        do {
            try FileSystem.makeDirectory(FileSystem.parent(of: keyFile), mode: 0o700)
            // The key of a build already listed (a publish run again) opens what is there; any other run
            // gets a fresh key, so nothing sealed by a run that stopped shares a key and nonce with this one.
            if FileSystem.exists(keyFile), repo.targetFiles[target]?.custom?.preload != nil {
                key = try ContentKey.read(
                    try FileSystem.read(keyFile, limit: Int(Releases.maxKeyBytes)), what: keyFile, build: build)
            } else {
                // An existing key is never overwritten: a listed preload may share objects sealed with it.
                if FileSystem.exists(keyFile) { try setAside(keyFile, of: build, channel: channel, repo: repo) }
                key = try ContentKey.generate()
                try FileSystem.writeAtomically(
                    try key.file(build: build, channel: channel, releaseAt: preload.releaseAt),
                    to: keyFile, mode: 0o600)
            }
            let scratch = keyFile + ".objects"
            try FileSystem.removeTree(scratch)
            try FileSystem.makeDirectory(OriginLayout(root: scratch).objectsFolder, mode: 0o700)
            return Sealing(key: key, keyFile: keyFile, scratch: scratch)
        } catch { throw PatchSyncError.wrap(error).during("preparing the content key of \(build)") }
    }

    /// Moves the key file of a preload id that is not listed (a publish stopped before signing, or a
    /// preload withdrawn) to `<key>.replaced-<time>`, so the new publish never overwrites it; refused when
    /// a listed preload commits to that key (it shares objects sealed with it).
    private func setAside(_ keyFile: String, of build: String, channel: String, repo: Repository) throws(PatchSyncError)
    {
        if let other = ChannelListing(repo, channel: channel).preloadSharingKey(
            of: build, origin: options.origin, pendingOnly: false)
        {
            throw PatchSyncError(
                .usage,
                "preload \(other.info.buildId) of \(channel) shares objects sealed with the content key of \(build) "
                    + "(\(keyFile)): publishing \(build) again would need a new key",
                remedy: "give this build a new --build-id; the key of \(build) stays as it is")
        }
        // link(2) never replaces a file: two runs in one second each keep their key.
        var attempt = 0
        while link(
            keyFile,
            keyFile + ".replaced-\(Int(options.now.timeIntervalSince1970))" + (attempt == 0 ? "" : "-\(attempt)")) != 0
        {
            guard errno == EEXIST, attempt < 1000 else {
                throw PatchSyncError(
                    .localIO, "cannot set aside the old content key \(keyFile): \(String(cString: strerror(errno)))")
            }
            attempt += 1
        }
        try? FileSystem.remove(keyFile)
    }

    /// Seals the new objects of `manifest` (written to the sealing folder) into the origin, seals the
    /// manifest, and publishes the build's preload plan as its target, with the releases role delegated.
    func publishSealed(
        _ manifest: inout Manifest, sealing: Sealing, bases: [DeltaBase],
        packs: [(source: DeltaSource, files: [Int])], target: String,
        repo: inout Repository
    ) throws(PatchSyncError) -> PreloadReport {
        let build = options.buildId.value, channel = options.channel.name
        let sealer = Sealer(key: sealing.key, build: build)
        let sealed = try sealObjects(manifest, sealing: sealing, sealer: sealer, packs: packs)
        manifest.sealed = sealed.values.sorted { $0.object < $1.object }
        if manifest.sealed?.isEmpty == true { manifest.sealed = nil }
        let (sealedManifest, manifestObject) = try sealer.seal(
            try manifest.packed(),
            object: PreloadPlan.manifestLabel(channel: channel, build: build))
        do {
            try FileSystem.writeAtomically(
                sealedManifest, to: OriginLayout(root: options.origin).objectFile(manifestObject.sealed))
        } catch {
            throw PatchSyncError.wrap(error)
        }
        let keys = try keyCommitments(sealed, sealing: sealing)
        let plan = try PreloadPlanner(manifest: manifest, sealed: sealed, origin: options.origin)
            .plan(
                releaseAt: options.preload?.releaseAt ?? options.now, keys: keys, manifestObject: manifestObject,
                bases: bases.map(\.manifest), packs: packs)
        try writer.writePreload(
            try plan.encoded(), target: target, manifest: manifest,
            releaseAt: options.preload?.releaseAt ?? options.now, published: publishNote,
            repo: &repo)
        // Where release and refresh find the key, recorded once the build is listed.
        try Repository.recordContentKeys(origin: options.origin, folder: options.preload?.contentKeys ?? "")
        try? FileSystem.removeTree(sealing.scratch)
        var routes: [String: Int64] = [:]
        for route in plan.routes {
            // The sealed manifest first, then the route's ranges: what such a player fetches ahead.
            routes[route.from] = plan.manifest.length + Set(route.bundles.values.joined()).reduce(0) { $0 + $1.length }
        }
        return PreloadReport(
            releaseAt: options.preload?.releaseAt ?? options.now, keyFile: sealing.keyFile,
            sealedObjects: sealing.written,
            sealedBytes: sealing.bytesWritten, routes: routes)
    }

    /// Seals every plain object the publish wrote to the scratch folder into the origin: a delta pack in
    /// fixed units, any other object unit by chunk. Returns the sealed objects, the shared ones too.
    private func sealObjects(
        _ manifest: Manifest, sealing: Sealing, sealer: Sealer, packs: [(source: DeltaSource, files: [Int])]
    ) throws(PatchSyncError) -> [SHA256Digest: SealedObject] {
        let deltaObjects = Set(packs.map(\.source.object))
        var sealed: [SHA256Digest: SealedObject] = sealing.shared
        for object in try Self.plainObjects(in: sealing.scratch) {
            let plain = OriginLayout(root: sealing.scratch).objectFile(object)
            let length: Int64
            do { length = Int64(try FileDescriptor(path: plain, flags: O_RDONLY).status().st_size) } catch {
                throw PatchSyncError.wrap(error)
            }
            let units =
                deltaObjects.contains(object)
                ? SealedLayout.fixed(length: length)
                : Sealer.chunkUnits(of: object, entries: manifest.files, length: length)
                    ?? SealedLayout.fixed(length: length)
            let result = try sealer.seal(file: plain, object: object, units: units, into: options.origin)
            sealing.count(result)
            sealed[object] = result
        }
        do { try FileSystem.syncFileSystem(of: OriginLayout(root: options.origin).objectsFolder) } catch {
            throw PatchSyncError.wrap(error)
        }
        return sealed
    }

    /// The commitment of each content key the sealed objects need: this build's, and those of the earlier
    /// preload builds whose sealed objects it shares (read from the content keys folder).
    private func keyCommitments(_ sealed: [SHA256Digest: SealedObject], sealing: Sealing) throws(PatchSyncError)
        -> [String: String]
    {
        let build = options.buildId.value, channel = options.channel.name
        var keys = [build: sealing.key.commitment(build: build)]
        for object in sealed.values where object.keyBuild != build {
            let path = Repository.contentKeyPath(
                options.preload?.contentKeys ?? "", channel: channel, build: object.keyBuild)
            keys[object.keyBuild] = try ContentKey.read(
                try FileSystem.read(path, limit: Int(Releases.maxKeyBytes)), what: path,
                build: object.keyBuild
            ).commitment(build: object.keyBuild)
        }
        return keys
    }

    /// The plain objects a publish wrote under `root`/objects (not the temporary ones).
    static func plainObjects(in root: String) throws(PatchSyncError) -> [SHA256Digest] {
        var found: [SHA256Digest] = []
        do {
            let objects = OriginLayout(root: root).objectsFolder
            for prefix in try FileSystem.list(objects) where OriginLayout.isObjectFolder(prefix) {
                for name in try FileSystem.list(objects + "/" + prefix) {
                    if let (sha, _) = ObjectNaming.parse(name) { found.append(sha) }
                }
            }
        } catch { throw PatchSyncError.wrap(error).during("listing the objects to seal in \(root)") }
        return found.sorted()
    }
}

/// Works out a preload build's plan: per recent build, what a player with it whole would fetch after
/// the release (the delta pack, then the chunks no delta covers and no file of it holds), as ranges of
/// the objects as stored, each with its SHA-256, so a client fetches and checks them before the release.
struct PreloadPlanner {
    let manifest: Manifest
    let sealed: [SHA256Digest: SealedObject]
    let origin: String

    init(manifest: Manifest, sealed: [SHA256Digest: SealedObject], origin: String) throws(PatchSyncError) {
        self.manifest = manifest
        self.sealed = sealed
        self.origin = origin
    }

    func plan(
        releaseAt: Date, keys: [String: String], manifestObject: SealedObject, bases: [Manifest],
        packs: [(source: DeltaSource, files: [Int])]
    ) throws(PatchSyncError) -> PreloadPlan {
        var bundlesOf: [SHA256Digest: Set<String>] = [:]
        for file in manifest.files where !file.chunks.isEmpty {
            bundlesOf[file.object, default: []].insert(file.bundle)
        }
        for pack in packs {
            bundlesOf[pack.source.object, default: []].formUnion(pack.files.map { manifest.files[$0].bundle })
        }
        let objects = sealed.values.sorted { $0.sealed < $1.sealed }.map { object in
            PreloadPlan.PlanObject(
                sealed: object.sealed, length: object.length,
                bundles: (bundlesOf[object.object] ?? []).sorted())
        }
        let shared = Set(manifest.files.filter { !$0.chunks.isEmpty && sealed[$0.object] == nil }.flatMap(\.objects))
            .sorted()
        var routes: [PreloadPlan.Route] = []
        for base in bases {
            let pack = packs.first { $0.source.from == base.buildId }
            routes.append(try route(from: base, pack: pack))
        }
        // Bundles by name, required and priority only: their paths may name what is new.
        let bundles = manifest.bundles.map {
            Bundle(name: $0.name, required: $0.required, priority: $0.priority, paths: [])
        }
        return PreloadPlan(
            formatVersion: PreloadPlan.formatVersion, buildId: manifest.buildId.value,
            channel: manifest.channel.name, releaseAt: releaseAt, keys: keys, manifest: manifestObject,
            bundles: bundles, objects: objects, sharedObjects: shared, routes: routes)
    }

    /// What a sync from `base` (whole) fetches, per bundle: the same ``Plan`` a client makes, less the
    /// files the delta pack rebuilds, its requests mapped onto the stored objects.
    private func route(from base: Manifest, pack: (source: DeltaSource, files: [Int])?) throws(PatchSyncError)
        -> PreloadPlan.Route
    {
        var live: [Plan.Content: String] = [:], liveChunks: [SHA256Digest: Plan.LocalChunk] = [:]
        for file in base.files {
            live[Plan.Content(file)] = file.path
            for chunk in file.chunks {
                liveChunks[chunk.sha256] = Plan.LocalChunk(path: file.path, offset: chunk.offset)
            }
        }
        let plan = Plan(manifest: manifest, live: live, liveChunks: liveChunks, done: [])
        let covered = Set((pack?.files ?? []).map { manifest.files[$0].path })
        let bundleOf = Dictionary(manifest.files.map { ($0.path, $0.bundle) }, uniquingKeysWith: { a, _ in a })
        var byBundle: [String: [Plan.Need]] = [:]
        for need in plan.fetch {
            let open = need.destinations.filter { !covered.contains($0.path) }
            for bundle in Set(open.compactMap { bundleOf[$0.path] }) { byBundle[bundle, default: []].append(need) }
        }
        var ranges: [String: [PreloadPlan.SealedRange]] = [:]
        var hashed: [String: PreloadPlan.SealedRange] = [:]
        for (bundle, needs) in byBundle {
            var fetch = Plan()
            fetch.fetch = needs
            for request in fetch.requests(gap: 0, maxBytes: 16 << 20) {
                let range = try self.range(of: request)
                let key = "\(range.object.hex):\(range.offset):\(range.length)"
                let done: PreloadPlan.SealedRange
                if let known = hashed[key] { done = known } else { done = try hash(range) }
                hashed[key] = done
                ranges[bundle, default: []].append(done)
            }
        }
        if let pack {
            let object = sealed[pack.source.object]
            let whole = PreloadPlan.SealedRange(
                object: object?.sealed ?? pack.source.object, offset: 0,
                length: object?.length ?? pack.source.length,
                sha256: object?.sealed ?? pack.source.object)
            for bundle in Set(pack.files.map { manifest.files[$0].bundle }) {
                ranges[bundle, default: []].insert(whole, at: 0)
            }
        }
        return PreloadPlan.Route(from: base.buildId.value, bundles: ranges)
    }

    /// The stored range of one request: its sealed units when the object is sealed, else its plain bytes
    /// (content the origin serves in the clear that the base lacks). The hash is filled in by ``hash(_:)``.
    private func range(of request: [Plan.Need]) throws(PatchSyncError) -> PreloadPlan.SealedRange {
        let first = request[0].chunk, last = request[request.count - 1].chunk
        guard let object = sealed[request[0].object] else {
            guard ObjectNaming.current.segment(of: first.objectOffset) == 0 else {
                throw PatchSyncError(
                    .usage,
                    "a preload's plan names content of object \(request[0].object) beyond its first 256 MiB, "
                        + "which a preload cannot fetch by its segment",
                    remedy: "publish this build without --preload, or with the large file changed so that it is sealed")
            }
            return PreloadPlan.SealedRange(
                object: request[0].object, offset: first.objectOffset,
                length: last.objectOffset + Int64(last.objectLength) - first.objectOffset,
                sha256: request[0].object)
        }
        let layout = SealedLayout(units: object.units)
        guard let from = layout.unit(startingAt: first.objectOffset),
            let to = layout.unit(startingAt: last.objectOffset)
        else {
            throw PatchSyncError(.internal, "a chunk of object \(object.object) does not start a sealed unit")
        }
        let span = layout.sealedRange(from, to)
        return PreloadPlan.SealedRange(
            object: object.sealed, offset: span.offset, length: span.length, sha256: object.sealed)
    }

    private func hash(_ range: PreloadPlan.SealedRange) throws(PatchSyncError) -> PreloadPlan.SealedRange {
        var out = range
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: Int(range.length), alignment: 16)
        defer { buffer.deallocate() }
        do {
            try FileDescriptor(path: OriginLayout(root: origin).objectFile(range.object), flags: O_RDONLY).read(
                into: buffer, at: range.offset)
        } catch { throw PatchSyncError.wrap(error).during("reading a range of object \(range.object)") }
        out.sha256 = SHA256Hasher.hash(UnsafeRawBufferPointer(buffer))
        return out
    }
}
