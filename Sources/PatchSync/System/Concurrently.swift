import Foundation

/// Work on many items, a few at a time.
enum Concurrently {
    /// Runs `body` on each of `items`, at most `limit` at once; the first failure ends the others.
    static func each<Item: Sendable>(
        _ items: [Item], atOnce limit: Int,
        _ body: @escaping @Sendable (Item) async throws -> Void
    ) async throws(PatchSyncError) {
        do {
            try await withThrowingTaskGroup(of: Void.self) { group in
                var running = 0
                for item in items {
                    if running >= limit {
                        _ = try await group.next()
                        running -= 1
                    }
                    group.addTask { try await body(item) }
                    running += 1
                }
                for try await _ in group {}
            }
        } catch { throw PatchSyncError.wrap(error) }
    }
}
