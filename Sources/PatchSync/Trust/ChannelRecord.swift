import Foundation

/// What signed targets metadata says of a channel beyond its listed builds: the highest sequence it
/// ever listed, and why it lists no build when a withdraw emptied it. A target of its own
/// (`channels/<channel>.json`, its custom field the record), written only when the listed builds do
/// not say it: the highest sequence was unlisted (a withdrawn preload, a withdrawn last build), or the
/// channel was withdrawn. Being signed and in the repository, it is uploaded with it: an origin
/// rebuilt from its bucket never gives a sequence again that players have seen.
public struct ChannelRecord: Codable, Hashable, Sendable {
    /// Always "channel": what tells this custom field from a build's.
    public var record: String
    public var channel: String
    public var highestSequence: Int
    /// Set while a withdraw left the channel without an installable build.
    public var withdrawn: Withdrawal?

    public struct Withdrawal: Codable, Hashable, Sendable {
        /// The build taken off last.
        public var build: String
        public var reason: String?
        public var at: Date
    }

    public init(channel: String, highestSequence: Int, withdrawn: Withdrawal? = nil) {
        record = "channel"
        self.channel = channel
        self.highestSequence = highestSequence
        self.withdrawn = withdrawn
    }

    /// The target path of `channel`'s record.
    public static func targetPath(channel: String) -> String { "channels/\(channel).json" }

    /// The record's bytes, as the target file holds them (sorted keys).
    func encoded() throws(PatchSyncError) -> Data {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        encoder.dateEncodingStrategy = .iso8601
        do { return try encoder.encode(self) } catch {
            throw PatchSyncError(.internal, "encoding the record of channel \(channel): \(error)")
        }
    }

    /// The records `targets` holds, by channel.
    static func all(in targets: [String: TargetFile]) -> [String: ChannelRecord] {
        var records: [String: ChannelRecord] = [:]
        for (path, file) in targets {
            if let record = file.channelRecord, path == targetPath(channel: record.channel) {
                records[record.channel] = record
            }
        }
        return records
    }
}
