import ArgumentParser
import PatchSync

/// The keys a change of targets is signed with: the targets keys and the online key.
struct TargetsSigning: ParsableArguments {
    @Option(help: "A targets key file (repeat up to the targets threshold).") var targetsKey: [String] = []
    @Option(help: "The online key file (signs snapshot and timestamp).") var onlineKey: String

    func signers() throws(PatchSyncError) -> Repository.Signers {
        Repository.Signers(targets: try loadKeys(targetsKey), online: try SigningKey.load(path: onlineKey))
    }
}
