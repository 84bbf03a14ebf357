import Foundation

/// The chunks a share serves: those of the install's live build, its ready build and the builds kept
/// for rollback, each at its place in a file of that build's tree (as the install state records them,
/// with the bundles each deployment holds). Built from the kept manifests; a chunk is read back and
/// checked against its SHA-256 at every request, so a file changed by hand is never served as the
/// chunk it no longer holds.
public struct SharedChunks: Sendable {
    /// Where one chunk's bytes are: a file of a build and the chunk's offset and length in it.
    struct Place: Sendable {
        var file: String
        var offset: Int64
        var length: Int
    }

    private(set) var places: [SHA256Digest: Place] = [:]
    /// The deployments indexed (the state's live, ready and kept ones), to tell when to index again.
    public private(set) var deployments: [String] = []

    public var count: Int { places.count }

    /// Indexes what `install` holds now.
    public init(install: Install) throws(PatchSyncError) {
        let state = try install.state(readOnly: true).read()
        var chosen: [(String, String)] = []  // deployment, folder
        if let current = install.currentDeployment() { chosen.append((current, install.buildDirectory(current))) }
        if let ready = state.ready {
            let staged = install.stagedDirectory(ready.name)
            chosen.append((ready.name, FileSystem.isDirectory(staged) ? staged : install.buildDirectory(ready.name)))
        }
        for kept in state.history.reversed() where !chosen.contains(where: { $0.0 == kept }) {
            chosen.append((kept, install.buildDirectory(kept)))
        }
        for (deployment, folder) in chosen where FileSystem.isDirectory(folder) {
            guard let identity = try? install.deploymentIdentity(deployment),
                var manifest = try? install.keptManifest(deployment, sha: identity.manifest)
            else { continue }
            if let bundles = identity.bundles { manifest = manifest.selecting(bundles) }
            deployments.append(deployment)
            for file in manifest.files {
                for chunk in file.chunks where places[chunk.sha256] == nil {
                    places[chunk.sha256] = Place(
                        file: folder + "/" + file.path, offset: chunk.offset, length: chunk.length)
                }
            }
        }
    }

    /// The deployments `install` would index now (cheap: the state, no manifest).
    public static func deployments(of install: Install) -> [String] {
        guard let state = try? install.state(readOnly: true).read() else { return [] }
        var names = install.currentDeployment().map { [$0] } ?? []
        if let ready = state.ready, !names.contains(ready.name) { names.append(ready.name) }
        for kept in state.history.reversed() where !names.contains(kept) { names.append(kept) }
        return names
    }

    /// The length of chunk `sha`, when this install holds it.
    func length(of sha: SHA256Digest) -> Int? { places[sha]?.length }

    /// The bytes of chunk `sha`, read from its file and checked against the hash; nil when this
    /// install does not hold it (or its file no longer has it).
    func read(_ sha: SHA256Digest) -> [UInt8]? {
        guard let place = places[sha], place.length <= ChunkingParameters.largestChunk else { return nil }
        var bytes = [UInt8](repeating: 0, count: place.length)
        // O_NOFOLLOW: a link planted in a build's tree is not followed (and its bytes would fail the hash anyway).
        guard let file = try? FileDescriptor(path: place.file, flags: O_RDONLY | O_NOFOLLOW) else { return nil }
        let read = bytes.withUnsafeMutableBytes { buffer in (try? file.read(into: buffer, at: place.offset)) != nil }
        guard read, bytes.withUnsafeBytes({ SHA256Hasher.hash($0) }) == sha else { return nil }
        return bytes
    }
}

/// Which repository a share serves and a player follows: the SHA-256 of the sorted key ids of the root
/// role the install trusts. Two installs of one game agree on it; a share answers only requests that
/// name it.
public enum ShareIdentity {
    public static func of(_ install: Install) throws(PatchSyncError) -> String {
        let path = install.layout.metadataFolder + "/" + OriginLayout.rootName
        let data = try FileSystem.read(path, limit: Int(TrustClient.maxRootBytes))
        let root: Signed<RootMetadata> = try Signed(parsing: data, name: path)
        let ids = (root.signed.roles["root"]?.keyids ?? []).sorted().joined(separator: "\n")
        return SHA256Hasher.hash(Data(("patchsync-share\n" + ids).utf8)).hex
    }
}
