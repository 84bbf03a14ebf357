import Foundation

extension Install {
    /// The bundles a deployment holds, as the install's state records it (nil: all of its build's,
    /// for a deployment staged before bundles could be chosen, or one the state no longer names).
    func deploymentBundles(_ deployment: String) throws(PatchSyncError) -> [String]? {
        try deploymentIdentity(deployment)?.bundles
    }

    /// What the state records of deployment `deployment` (nil when it names none).
    func deploymentIdentity(_ deployment: String) throws(PatchSyncError) -> DeploymentIdentity? {
        let state = try state(readOnly: true).read()
        return state.deployed[deployment]
            ?? [state.ready, state.staging].compactMap { $0 }.first { $0.name == deployment }
    }

    /// The whole manifest kept for `deployment` (every bundle's files): from its cache when that was made
    /// from the manifest the state records for it (``ManifestCache``), else decoded from the signed JSON,
    /// which then becomes the cache when it hashes to that record.
    func keptManifest(_ deployment: String, sha: String?) throws(PatchSyncError) -> Manifest {
        let cache = layout.manifestCache(deployment)
        if let sha, let cached = ManifestCache.read(cache, sha: sha) { return cached }
        let path = manifestPath(deployment)
        let data = try FileSystem.read(path, limit: 256 << 20)
        let manifest = try Manifest.decode(data, what: path)
        if let sha, SHA256Hasher.hash(data).hex == sha { try? ManifestCache.write(manifest, sha: sha, to: cache) }
        return manifest
    }

    /// The bundles of the live tree, as the game sees them (`PATCHSYNC_BUNDLES`, `live-bundles.json`).
    public func liveBundles() -> [String] {
        guard let current = currentDeployment() else { return [] }
        if let chosen = try? deploymentBundles(current) { return chosen }
        guard let data = try? FileSystem.read(manifestPath(current), limit: 256 << 20),
            let manifest = try? Manifest.decode(data, what: manifestPath(current))
        else { return [] }
        return BundleSelection.downloadOrder(manifest.bundles).map(\.name)
    }

    /// `live-bundles.json` in the install: the live build and its bundles, for the game to read at run time.
    public var liveBundlesPath: String { layout.liveBundlesFile }

    /// Writes `live-bundles.json` when it does not already say what is live; returns the live bundles.
    @discardableResult
    func recordLiveBundles() -> [String] {
        struct Live: Codable, Equatable {
            var build: String
            var bundles: [String]
        }
        guard let current = currentDeployment() else { return [] }
        let live = Live(build: Deployment.buildID(of: current), bundles: liveBundles())
        if let data = try? FileSystem.read(liveBundlesPath, limit: 1 << 20),
            (try? JSONDecoder().decode(Live.self, from: data)) == live
        {
            return live.bundles
        }
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        _ = try? FileSystem.writeAtomically(try encoder.encode(live), to: liveBundlesPath)
        return live.bundles
    }

    /// Where the bundles of the build `sha` (whose manifest is `manifest`) stand, for a player who chose `selection`.
    func bundleProgress(
        state: InstallState, selection: BundleSelection, sha: String,
        manifest: Manifest
    ) throws(PatchSyncError) -> BundleProgress {
        try bundleProgress(state: state, selection: selection, sha: sha, summary: BuildSummary(manifest)) { manifest }
    }

    /// The same from the build's summary; `manifest` is read only while that build is being staged (the
    /// bytes staged so far are counted per chunk).
    func bundleProgress(
        state: InstallState, selection: BundleSelection, sha: String,
        summary: BuildSummary, manifest: () -> Manifest?
    ) throws(PatchSyncError) -> BundleProgress {
        let all = summary.selection(chosen: nil).wanted
        let live = state.currentIdentity.flatMap { $0.manifest == sha ? Set($0.bundles ?? all) : nil } ?? []
        let ready = state.ready.flatMap { $0.manifest == sha ? Set($0.bundles ?? all) : nil } ?? []
        var staged: [String: Int64] = [:]
        if let staging = state.staging, staging.manifest == sha, let store = try? self.state(readOnly: true),
            let manifest = manifest()
        {
            let selected = manifest.selecting(staging.bundles ?? all)
            let done = try StagedBuild(staging, in: self, state: store).recorded(selected)
            for file in selected.files {
                for (index, chunk) in file.chunks.enumerated() where done.contains(.init(path: file.path, index: index))
                {
                    staged[file.bundle, default: 0] += Int64(chunk.length)
                }
            }
        }
        let sizes = summary.bundleBytes, wanted = Set(selection.wanted)
        let entries = BundleSelection.downloadOrder(summary.bundles).map { bundle -> BundleProgress.Entry in
            let state: BundleProgress.Entry.State =
                live.contains(bundle.name)
                ? .live
                : ready.contains(bundle.name) ? .ready : wanted.contains(bundle.name) ? .pending : .notSelected
            return BundleProgress.Entry(
                name: bundle.name, required: bundle.required, selected: wanted.contains(bundle.name),
                state: state, bytes: sizes[bundle.name] ?? 0,
                bytesDone: state == .pending ? staged[bundle.name] ?? 0 : nil)
        }
        let playable =
            entries.contains { $0.state == .live || $0.state == .ready }
            && entries.allSatisfy { !$0.required || $0.state == .live || $0.state == .ready }
        return BundleProgress(
            buildId: summary.buildId, playable: playable, bundles: entries, dropped: selection.dropped)
    }

    /// The bundles of the newest build this install knows (the one its last sync set out to install,
    /// else the live one), for `status` and `bundles`.
    public func bundleProgress() throws(PatchSyncError) -> BundleProgress? {
        let state = try state(readOnly: true).read()
        if let (sha, summary) = newestKnownSummary(state) {
            return try bundleProgress(
                state: state, selection: try config().selection(of: summary), sha: sha, summary: summary
            ) { newestKnownManifest().flatMap { $0.0 == sha ? $0.1 : nil } }
        }
        guard let (sha, manifest) = newestKnownManifest() else { return nil }
        return try bundleProgress(
            state: state, selection: try config().selection(of: manifest),
            sha: sha, manifest: manifest)
    }

    /// The summary of the newest build this install knows, as its deployment's record keeps it (nil
    /// when the record has none: the manifest is read instead).
    func newestKnownSummary(_ state: InstallState) -> (String, BuildSummary)? {
        let sha = state.newestManifest ?? state.currentIdentity?.manifest
        for identity in [state.staging, state.ready, state.currentIdentity].compactMap({ $0 })
        where sha == nil || identity.manifest == sha {
            if let summary = identity.summary { return (identity.manifest, summary) }
        }
        return nil
    }
}

/// An install's choice of optional bundles after `bundles add`/`remove`.
public struct BundleChoice: Codable, Sendable {
    /// The optional bundles chosen, or nil: every optional bundle of each build but `excluded`.
    public var chosen: [String]?
    public var excluded: [String]
    /// Chosen bundles the newest known build does not have (installed when a build has them).
    public var unknown: [String]
}

extension Install {
    /// The manifest of the newest build this install knows, with its target's SHA-256: the one its last
    /// sync set out to install, else the live one.
    func newestKnownManifest() -> (String, Manifest)? {
        guard let state = try? state(readOnly: true).read() else { return nil }
        let sha = state.newestManifest ?? state.currentIdentity?.manifest
        for identity in [state.staging, state.ready, state.currentIdentity].compactMap({ $0 })
        where sha == nil || identity.manifest == sha {
            if let manifest = try? keptManifest(identity.name, sha: identity.manifest) {
                return (identity.manifest, manifest)
            }
        }
        return nil
    }

    /// Changes the optional bundles this install holds (kept in its configuration; the next sync
    /// stages the change). Names the newest known build lacks are refused when added, as are required
    /// bundles, which are always installed.
    public func chooseBundles(adding: [String], removing: [String]) throws(PatchSyncError) -> BundleChoice {
        let held = configLock()
        defer { withExtendedLifetime(held) {} }
        var config = try config()
        let known =
            (try? state(readOnly: true).read()).flatMap { newestKnownSummary($0)?.1 }
            ?? newestKnownManifest().map { BuildSummary($0.1) }
        let optional = known.map { $0.bundles.filter { !$0.required }.map(\.name) }
        let required = Set(known?.bundles.filter(\.required).map(\.name) ?? [])
        for name in adding + removing where required.contains(name) {
            throw PatchSyncError(
                .usage, "bundle \(name) is required: it is always installed",
                remedy: "add or remove optional bundles only: \((optional ?? []).joined(separator: ", "))")
        }
        if let optional {
            for name in adding where !optional.contains(name) {
                throw PatchSyncError(
                    .usage, "build \(known?.buildId ?? "?") has no optional bundle \(name)",
                    remedy: optional.isEmpty
                        ? "this build has no optional bundles"
                        : "choose among: \(optional.joined(separator: ", ")) (`patchsync bundles` lists them)")
            }
        }
        if config.bundles == nil {
            // Every optional bundle but those left out: one a later build adds is installed too.
            var excluded = Set(config.excludedBundles ?? [])
            excluded.formUnion(removing)
            excluded.subtract(adding)
            config.excludedBundles = excluded.isEmpty ? nil : excluded.sorted()
            try saveConfig(config)
            return BundleChoice(chosen: nil, excluded: excluded.sorted(), unknown: [])
        }
        var chosen = Set(config.bundles ?? [])
        chosen.formUnion(adding)
        chosen.subtract(removing)
        config.bundles = chosen.sorted()
        try saveConfig(config)
        return BundleChoice(
            chosen: chosen.sorted(), excluded: [],
            unknown: chosen.filter { name in optional.map { !$0.contains(name) } ?? false }.sorted())
    }
}

extension Install {
    /// The manifest kept for a deployment (`.patchsync/manifests/<deployment>.json.gz`), as the
    /// deployment holds it: only its bundles' files, links and folders.
    func manifest(of deployment: String) throws(PatchSyncError) -> Manifest {
        let identity = try deploymentIdentity(deployment)
        let manifest = try keptManifest(deployment, sha: identity?.manifest)
        guard let bundles = identity?.bundles else { return manifest }
        return manifest.selecting(bundles)
    }

    /// `deployment`'s manifest without its files, for its links and folders (narrowed to the bundles it
    /// holds), from the head of its cache: no per-file values, whatever the build's size.
    func manifestHead(of deployment: String) throws(PatchSyncError) -> Manifest {
        let identity = try deploymentIdentity(deployment)
        var head: Manifest
        if let sha = identity?.manifest, let cached = ManifestCache.readHead(layout.manifestCache(deployment), sha: sha)
        {
            head = cached
        } else {
            head = try keptManifest(deployment, sha: identity?.manifest)
            head.files = []
        }
        guard let bundles = identity?.bundles else { return head }
        return head.selecting(bundles)
    }

    /// The verified content of the live build, and of the ready one (an earlier step of this sync, or
    /// of an earlier run), through the stat cache: what staging may link or copy.
    func liveTrees(state: StateStore, interest: LiveTree.Interest? = nil) throws(PatchSyncError) -> LiveTree {
        // The ready tree's files first: an apply may move it into builds/ meanwhile (link() follows it
        // there), and may then retire the current deployment when it holds the same build.
        var live = LiveTree()
        let recorded = try state.read()
        let ready = recorded.ready, current = currentDeployment()
        if let ready, ready.name != current, let manifest = try? manifest(of: ready.name) {
            let staged = stagedDirectory(ready.name)
            let directory = FileSystem.isDirectory(staged) ? staged : buildDirectory(ready.name)
            if FileSystem.isDirectory(directory) {
                live = try LiveTree(
                    manifest: manifest, directory: directory, build: ready.recordsKey, state: state,
                    interest: interest)
            }
        }
        if let current, let manifest = try? manifest(of: current) {
            live.merge(
                try LiveTree(
                    manifest: manifest, directory: buildDirectory(current), build: recorded.recordsKey(of: current),
                    state: state, interest: interest))
            live.manifest = manifest  // the live build: the source its delta packs come from
        }
        // Every other build kept for rollback, newest first: a publisher's rollback to one of them, or a
        // build that brings back its files, fetches nothing they hold (checked through the stat cache).
        for kept in recorded.history.reversed() where kept != current && kept != ready?.name {
            let folder = buildDirectory(kept)
            guard FileSystem.isDirectory(folder), let manifest = try? manifest(of: kept) else { continue }
            live.merge(
                try LiveTree(
                    manifest: manifest, directory: folder, build: recorded.recordsKey(of: kept), state: state,
                    interest: interest))
        }
        return live
    }
}
