import Foundation

/// A folder in `builds/` holding one complete build: named by the build id, or
/// `<build id>@<n>` when the name was used before (a repair, the same build id on another
/// channel, a re-install after a rollback), since a live folder is never written into and a
/// name is never given to other content (``InstallState/newDeploymentName(for:inUse:)``).
enum Deployment {
    /// The build id of a deployment name.
    static func buildID(of deployment: String) -> String {
        deployment.split(separator: "@", maxSplits: 1).first.map(String.init) ?? deployment
    }
}
