import Foundation

/// The key files of a repository: an offline root key and an online key.
public enum Keys {
    /// Where `keygen` writes the files.
    public struct Paths: Codable, Sendable {
        public var rootKey: String
        public var onlineKey: String
    }

    /// Writes `root.key` and `online.key` (mode 0600) into `directory`; refuses to overwrite.
    public static func generate(into directory: String) throws(PatchSyncError) -> Paths {
        let paths = Paths(rootKey: directory + "/root.key", onlineKey: directory + "/online.key")
        for path in [paths.rootKey, paths.onlineKey] where FileSystem.exists(path) {
            throw PatchSyncError(.usage, "\(path) already exists", remedy: "choose an empty folder; keys are never overwritten")
        }
        for path in [paths.rootKey, paths.onlineKey] {
            let key = SigningKey(try Ed25519.generate())
            do { try FileSystem.writeAtomically(try key.fileData(), to: path, mode: 0o600) } catch {
                throw PatchSyncError.wrap(error).during("writing \(path)")
            }
        }
        return paths
    }
}
