import Foundation

/// A channel a command would list a build on for the first time: refused when its name is close to
/// a channel the repository has (`lvie` beside `live`), unless the release engineer says it is meant.
/// A typo would otherwise make a channel no player follows, and the build would never reach anyone.
struct NewChannelCheck {
    /// At most this many edits (insert, delete, replace, swap of neighbours) apart is "close".
    static let closeEdits = 2

    /// Refuses `channel` when `repo` lists no build on it (and never did) and a listed channel's name is
    /// within ``closeEdits`` of it; `meant` (`--new-channel`) lets it through.
    static func check(_ channel: Channel, repo: Repository, meant: Bool, command: String) throws(PatchSyncError) {
        let existing = Set(ChannelListing.all(repo).map(\.channel)).union(
            ChannelListing.recordedSequences(origin: repo.origin).keys)
        guard !meant, !existing.contains(channel.name) else { return }
        let close = existing.filter { distance($0, channel.name) <= closeEdits }.sorted()
        guard let nearest = close.first else { return }
        throw PatchSyncError(
            .usage,
            "channel '\(channel.name)' is new to \(repo.origin), and its name is close to "
                + close.map { "'\($0)'" }.joined(separator: ", ")
                + " (the repository's channels: \(existing.sorted().joined(separator: ", ")))",
            remedy:
                "give --channel \(nearest) (\(command)); if a new channel '\(channel.name)' is meant, add --new-channel"
        )
    }

    /// The optimal string alignment distance between `a` and `b` (Levenshtein with swaps of neighbours).
    static func distance(_ a: String, _ b: String) -> Int {
        let a = Array(a.unicodeScalars), b = Array(b.unicodeScalars)
        guard !a.isEmpty, !b.isEmpty else { return max(a.count, b.count) }
        var rows = [[Int]](repeating: [Int](repeating: 0, count: b.count + 1), count: a.count + 1)
        for i in 0...a.count { rows[i][0] = i }
        for j in 0...b.count { rows[0][j] = j }
        for i in 1...a.count {
            for j in 1...b.count {
                let cost = a[i - 1] == b[j - 1] ? 0 : 1
                var best = min(rows[i - 1][j] + 1, rows[i][j - 1] + 1, rows[i - 1][j - 1] + cost)
                if i > 1, j > 1, a[i - 1] == b[j - 2], a[i - 2] == b[j - 1] { best = min(best, rows[i - 2][j - 2] + 1) }
                rows[i][j] = best
            }
        }
        return rows[a.count][b.count]
    }
}
