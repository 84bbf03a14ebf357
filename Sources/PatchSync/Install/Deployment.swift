import Foundation

/// A folder in `builds/` holding one complete build: named by the build id, or
/// `<build id>@<n>` when the same build is deployed again (a repair, or a re-install
/// after a rollback), since a live folder is never written into.
enum Deployment {
    /// The build id of a deployment name.
    static func buildID(of deployment: String) -> String {
        deployment.split(separator: "@", maxSplits: 1).first.map(String.init) ?? deployment
    }

    /// A deployment name for `build` that no folder in builds/ or staging/ uses yet.
    static func newName(for build: String, in install: Install) -> String {
        var name = build, n = 1
        while FileSystem.exists(install.buildDirectory(name)) || FileSystem.exists(install.stagedDirectory(name)) {
            n += 1
            name = "\(build)@\(n)"
        }
        return name
    }
}

extension StateStore {
    /// The deployments applied, oldest first (at most 16 remembered).
    func history() throws(PatchSyncError) -> [String] {
        guard let text = try setting("history"), let data = text.data(using: .utf8),
              let list = try? JSONDecoder().decode([String].self, from: data) else { return [] }
        return list
    }

    static func encode(history: [String]) -> String {
        let data = (try? JSONEncoder().encode(Array(history.suffix(16)))) ?? Data("[]".utf8)
        return String(decoding: data, as: UTF8.self)
    }
}

extension Install {
    /// The deployment `current` points at (the folder name in builds/), read from the symlink.
    public func currentDeployment() -> String? {
        guard let target = try? FileManager.default.destinationOfSymbolicLink(atPath: currentLink) else { return nil }
        return (target as NSString).lastPathComponent
    }

    /// The build id of the live tree.
    public func currentBuild() -> String? { currentDeployment().map(Deployment.buildID(of:)) }

    /// The deployment before the current one, if its folder is still kept.
    func previousDeployment(_ state: StateStore) throws(PatchSyncError) -> String? {
        let history = try state.history()
        guard history.count >= 2 else { return nil }
        let previous = history[history.count - 2]
        return FileSystem.isDirectory(buildDirectory(previous)) ? previous : nil
    }
}
