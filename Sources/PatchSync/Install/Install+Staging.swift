import Foundation

extension StagedBuild {
    /// The deployment `identity` as it is staged in `install` (`.patchsync/staging/<name>`).
    init(_ identity: DeploymentIdentity, in install: Install, state: StateStore) {
        self.init(identity, directory: install.stagedDirectory(identity.name), state: state)
    }

    /// ``makeFolder(under:)`` beneath the install's state folder.
    @discardableResult
    func makeFolder(in install: Install) throws(PatchSyncError) -> TreeRoot {
        try makeFolder(under: install.stateDirectory)
    }
}
