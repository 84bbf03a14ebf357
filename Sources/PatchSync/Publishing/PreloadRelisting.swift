import Foundation

/// Keeps a channel's pending preloads above a build listed while they wait (a hotfix, a promote, a
/// rollback): each is listed again with a sequence above it, its content untouched. Only its manifest
/// is sealed anew (with the build's own content key, under a label that names the new sequence, so no
/// nonce is ever used twice) and its plan names that manifest; every sealed object players preloaded
/// stays what the plan lists, so a preload already fetched stays fetched.
struct PreloadRelisting {
    let origin: String
    /// The publisher's folder of content keys (`<folder>/<channel>/<build>.key`).
    let contentKeys: String?

    /// Lists again, in `targets`, each pending preload of `channel` that `sequence` (an installable
    /// build listed now) would leave behind, above it in their order; returns their build ids. Refused,
    /// before anything is written, when a key is not at hand.
    func relist(
        channel: String, above sequence: Int, in targets: inout [String: TargetFile], repo: Repository
    ) throws(PatchSyncError) -> [String] {
        let waiting = ChannelListing(repo, channel: channel).pendingPreloads.sorted {
            $0.info.sequence < $1.info.sequence
        }
        guard !waiting.isEmpty else { return [] }
        let keys = try waiting.map { preload throws(PatchSyncError) in
            try key(of: preload, channel: channel, repo: repo)
        }
        var relisted: [String] = []
        for (offset, (preload, key)) in zip(waiting, keys).enumerated() {
            let next = sequence + 1 + offset
            targets[preload.path] = try listAgain(preload, key: key, sequence: next)
            relisted.append(preload.info.buildId)
        }
        return relisted
    }

    /// Refuses, before any work, a listing that would need a pending preload's key that is not at hand.
    func checkKeys(channel: String, repo: Repository) throws(PatchSyncError) {
        for preload in ChannelListing(repo, channel: channel).pendingPreloads {
            _ = try key(of: preload, channel: channel, repo: repo)
        }
    }

    /// The content key of `preload`: the released one from the origin, else the one in the key folder;
    /// refused by name when it is in neither.
    func key(of preload: ChannelListing.Build, channel: String, repo: Repository) throws(PatchSyncError) -> ContentKey {
        let build = preload.info.buildId
        let keyTarget = OriginLayout.keyTarget(channel: channel, build: build)
        if let released = repo.releasedKeys[keyTarget] {
            return try ContentKey.read(
                try Repository.targetData(in: origin, keyTarget, released), what: "the released key of \(build)",
                build: build)
        }
        let path = contentKeys.map { Repository.contentKeyPath($0, channel: channel, build: build) }
        guard let path, FileSystem.exists(path) else {
            throw PatchSyncError(
                .usage,
                "channel \(channel) has pending preload \(build): to list a build below it, the preload is listed again "
                    + "above it, which needs its content key" + (path.map { " (\($0) is not there)" } ?? ""),
                remedy: "give --content-keys: the folder publish --release-at wrote the key to")
        }
        return try ContentKey.read(
            try FileSystem.read(path, limit: Int(Releases.maxKeyBytes)), what: path, build: build)
    }

    /// `preload`'s target listed with `sequence` (and `rollback`, for a released preload a rollback puts
    /// back): its manifest sealed anew with that sequence, and its plan naming that manifest (both
    /// written to the origin).
    func listAgain(
        _ preload: ChannelListing.Build, key: ContentKey, sequence: Int, rollback: RollbackNote? = nil
    ) throws(PatchSyncError) -> TargetFile {
        var plan = try Repository.plan(in: origin, preload.path, preload.file)
        var manifest = try plan.openManifest(in: origin, key: key)
        manifest.sequence = sequence
        let label = PreloadPlan.manifestLabel(channel: plan.channel, build: plan.buildId, relistedAs: sequence)
        let (sealed, object) = try Sealer(key: key, build: plan.buildId).seal(
            try manifest.packed(), object: label)
        let layout = OriginLayout(root: origin)
        do { try FileSystem.writeAtomically(sealed, to: layout.objectFile(object.sealed)) } catch {
            throw PatchSyncError.wrap(error).during("sealing the manifest of \(plan.buildId) again")
        }
        plan.manifest = object
        var info = preload.info
        info.sequence = sequence
        info.rollback = rollback
        info.withdrawn = nil
        return try TargetWriter.store(try plan.encoded(), as: preload.path, in: origin, info: info)
    }
}
