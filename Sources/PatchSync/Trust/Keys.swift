import Foundation

/// The key files of a repository: root (offline), targets (signs what builds exist; kept off the
/// always-on host) and online (signs snapshot and timestamp; the cron job's only key).
public enum Keys {
    /// Where `keygen` wrote the files (nil: not asked for).
    public struct Paths: Codable, Sendable {
        public var rootKey: String?
        public var targetsKey: String?
        public var onlineKey: String?
    }

    /// The roles `keygen` can write a key for.
    public static let roles = ["root", "targets", "online"]

    /// Writes `<role>.key` (mode 0600) into `directory` for each of `roles`; refuses to overwrite.
    public static func generate(into directory: String, roles: [String] = Keys.roles) throws(PatchSyncError) -> Paths {
        for role in roles where !Self.roles.contains(role) {
            throw PatchSyncError(.usage, "there is no key role \(role)", remedy: "give root, targets or online")
        }
        let files = roles.map { directory + "/\($0).key" }
        for path in files where FileSystem.exists(path) {
            throw PatchSyncError(
                .usage, "\(path) already exists", remedy: "choose an empty folder; keys are never overwritten")
        }
        for path in files {
            let key = SigningKey(try Ed25519.generate())
            do { try FileSystem.writeAtomically(try key.fileData(), to: path, mode: 0o600) } catch {
                throw PatchSyncError.wrap(error).during("writing \(path)")
            }
        }
        func path(_ role: String) -> String? { roles.contains(role) ? directory + "/\(role).key" : nil }
        return Paths(rootKey: path("root"), targetsKey: path("targets"), onlineKey: path("online"))
    }
}
