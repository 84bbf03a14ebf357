import Foundation

extension Install {
    /// The deployment `current` points at (the folder name in builds/), read from the symlink.
    public func currentDeployment() -> String? {
        guard let target = try? FileManager.default.destinationOfSymbolicLink(atPath: currentLink) else { return nil }
        return InstallLayout.deployment(ofCurrentTarget: target)
    }

    /// The build id of the live tree.
    public func currentBuild() -> String? { currentDeployment().map(Deployment.buildID(of:)) }

    /// The deployment before the current one, if its folder is still kept.
    func previousDeployment(_ state: InstallState) -> String? {
        guard let previous = state.previous else { return nil }
        return FileSystem.isDirectory(buildDirectory(previous)) ? previous : nil
    }

    /// Whether `name` is taken by a folder in builds/, staging/ or trash/ (retired names stay taken).
    func deploymentFolderExists(_ name: String) -> Bool {
        FileSystem.exists(buildDirectory(name)) || FileSystem.exists(stagedDirectory(name))
    }
}
