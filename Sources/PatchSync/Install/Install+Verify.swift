import Foundation

extension Install {
    /// Checks the live tree against its manifest: size and mode of every file, and its
    /// SHA-256 where the stat cache cannot vouch for it (or always, with `full`).
    public func verify(full: Bool) throws(PatchSyncError) -> VerifyReport {
        let lock = try lock(.live, for: "verify")
        defer { withExtendedLifetime(lock) {} }
        let state = try state()
        try reconcile(state)  // an apply killed after its flip is finished first: the records name what is checked
        guard let deployment = currentDeployment() else {
            throw PatchSyncError(
                .usage, "\(root) has no build installed", remedy: "run `patchsync sync` and `patchsync apply`")
        }
        let build = Deployment.buildID(of: deployment)
        try dropTamperedReady(state)  // no record names a ready tree that was removed or changed by hand
        let directory = buildDirectory(deployment)
        var report = VerifyReport(deployment: deployment, buildId: build, filesChecked: 0, filesHashed: 0, damaged: [])
        var refreshed: [String: StateStore.FileStat] = [:]
        func visit(_ file: StateStore.BuildFile, _ cached: StateStore.FileStat?) {
            report.filesChecked += 1
            let (damage, hashed, stat) = check(file, at: directory + "/" + file.path, cache: cached, full: full)
            if hashed { report.filesHashed += 1 }
            if let damage {
                report.damaged.append(damage)
            } else if let stat, stat != cached {
                refreshed[file.path] = stat
            }
        }
        // The files as staging recorded them, streamed from the state (flat memory at any size); the
        // manifest serves older installs, whose state recorded none.
        let records = try state.read().recordsKey(of: deployment)
        if try state.forEachBuildFile(build: records, { file, cached in visit(file, cached) }) == 0 {
            let cache = try state.statCache(build: records)
            for file in try self.manifest(of: deployment).files {
                let recorded = StateStore.BuildFile(
                    path: file.path, size: file.size, mode: Plan.installedMode(file.mode), sha256: file.sha256.hex)
                visit(recorded, cache[file.path])
            }
        }
        if !refreshed.isEmpty { try state.saveStatCache(build: records, refreshed) }
        // Links and empty folders are in the manifest only: without it they would go unchecked.
        let head = try manifestHead(of: deployment)
        report.entriesChecked = (head.links?.count ?? 0) + (head.folders?.count ?? 0)
        report.damaged += TreeEntries.check(head, in: directory)
        return report
    }

    private func check(
        _ file: StateStore.BuildFile, at path: String, cache: StateStore.FileStat?,
        full: Bool
    ) -> (VerifyReport.Damage?, Bool, StateStore.FileStat?) {
        func damage(_ problem: VerifyReport.Problem, _ expected: String, _ actual: String?) -> VerifyReport.Damage {
            VerifyReport.Damage(path: file.path, problem: problem, expected: expected, actual: actual)
        }
        guard let st = try? FileSystem.status(path), (st.st_mode & S_IFMT) == S_IFREG else {
            return (damage(.missing, "a file of \(file.size) bytes", nil), false, nil)
        }
        guard Int64(st.st_size) == file.size else {
            return (damage(.wrongSize, "\(file.size) bytes", "\(st.st_size) bytes"), false, nil)
        }
        let mode = UInt32(st.st_mode) & 0o7777, expected = file.mode
        guard mode == expected else {
            return (damage(.wrongMode, String(expected, radix: 8), String(mode, radix: 8)), false, nil)
        }
        let stat = StateStore.FileStat(st)
        if !full && cache == stat { return (nil, false, stat) }
        guard let sha = try? SHA256Hasher.hash(file: path) else {
            return (damage(.missing, "a readable file", "unreadable"), true, nil)
        }
        return sha.hex == file.sha256 ? (nil, true, stat) : (damage(.wrongHash, file.sha256, sha.hex), true, nil)
    }
}
