import Foundation

/// What a publish checks against the channel before it writes anything: the wrong folder going live,
/// and a dry run's report.
extension Publisher {
    /// The channel's current build, as the publisher's tools read it: the newest installable build, a
    /// released preload too (nil when there is none, or its manifest cannot be read).
    func currentManifest(_ repo: Repository) -> Manifest? {
        guard let current = ChannelListing(repo, channel: options.channel.name).current else { return nil }
        return try? repo.listedManifest(current.path, current.file, validating: false)
    }

    /// Refuses, unless ``Options/replaceMost``, a folder that lacks more than half the files (by count
    /// or by bytes) of the channel's current build: most likely the wrong folder.
    func checkReplaceMost(_ folder: BuildFolder, repo: Repository) throws(PatchSyncError) {
        guard !options.replaceMost, let current = currentManifest(repo), current.files.count >= 4,
            current.buildId != options.buildId
        else { return }
        let kept = Set(folder.files)
        let removed = current.files.filter { !kept.contains($0.path) }
        let removedBytes = removed.reduce(Int64(0)) { $0 + $1.size }
        guard removed.count * 2 > current.files.count || removedBytes * 2 > current.totalSize else { return }
        throw PatchSyncError(
            .usage,
            "\(options.buildDirectory) would remove \(removed.count) of the \(current.files.count) files "
                + "(\(ByteCount.format(removedBytes)) of \(ByteCount.format(current.totalSize))) of build \(current.buildId), "
                + "current on \(options.channel): is it the right folder?"
                + (folder.excluded.isEmpty ? "" : " (--exclude left out \(folder.excluded.count) path(s))"),
            remedy: "check the folder (`patchsync publish … --dry-run` shows the patch); if the build really drops "
                + "most files, publish again with --replace-most")
    }

    /// A dry run, after the checks a publish makes first (the folder's refusals, all at once, the
    /// replace-most check, a pending preload): the patch from the channel's current build, computed
    /// without writing anything.
    func dryRun(_ repo: Repository, folder: BuildFolder, check: BuildFolderCheck) throws(PatchSyncError) -> Report {
        var manifest = try Self.describe(
            buildDirectory: options.buildDirectory, bundles: options.bundles, chunking: options.chunking,
            dereferenceExternal: options.dereferenceExternal, exclude: options.exclude)
        manifest.buildId = options.buildId
        manifest.channel = options.channel
        let current = currentManifest(repo)
        var report = Report(
            buildId: options.buildId.value, channel: options.channel.name, sequence: nextSequence(repo),
            files: manifest.files.count,
            totalBytes: manifest.totalSize, objectsWritten: 0, objectBytesWritten: 0, alreadyPublished: false,
            manifestTarget: Manifest.targetPath(channel: options.channel, buildId: options.buildId))
        report.dryRun = true
        report.excluded = folder.excluded
        report.patch = PatchDiff(
            old: current, new: manifest, oldName: current?.buildId.value ?? "nothing", newName: options.buildId.value)
        report.warnings =
            check.warnings.map(\.description) + repo.expiryWarnings(now: options.now)
            + Self.unusedGlobs(options.exclude, folder)
        return report
    }
}
