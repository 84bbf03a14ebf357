import Foundation

/// What `verify` found in the live tree.
public struct VerifyReport: Codable, Sendable {
    /// How a file differs from its manifest.
    public enum Problem: String, Codable, Sendable {
        case missing, wrongSize, wrongHash, wrongMode
        /// A symbolic link that points elsewhere than the manifest says.
        case wrongLink
    }

    /// One damaged file.
    public struct Damage: Codable, Sendable, Hashable {
        public var path: String
        public var problem: Problem
        public var expected: String
        public var actual: String?
    }

    public var deployment: String
    public var buildId: String
    public var filesChecked: Int
    /// Files whose content was hashed (all with --full; those the stat cache could not vouch for otherwise).
    public var filesHashed: Int
    /// Symbolic links and empty folders checked.
    public var entriesChecked = 0
    public var damaged: [Damage]
    /// The repaired build staged by --repair, ready for the next apply.
    public var repairStaged: String?
    /// True when --now applied the repair at once.
    public var applied = false
}
