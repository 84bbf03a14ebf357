/// The sizes that shape content-defined chunks.
public struct ChunkingParameters: Codable, Hashable, Sendable {
    /// No cut before this many bytes (except at the end of a file).
    public var minSize: Int
    /// The target average; a power of two.
    public var averageSize: Int
    /// A cut is forced at this many bytes.
    public var maxSize: Int

    /// The defaults: 64 KiB / 256 KiB / 1 MiB, chosen by the chunk-size study in Benchmarks/RESULTS.md.
    public static let standard = ChunkingParameters(minSize: 64 << 10, averageSize: 256 << 10, maxSize: 1 << 20)

    public init(minSize: Int, averageSize: Int, maxSize: Int) {
        self.minSize = minSize
        self.averageSize = averageSize
        self.maxSize = maxSize
    }

    /// The largest chunk any chunking may make.
    static let largestChunk = 64 << 20

    /// Refuses sizes a chunker cannot honour.
    func validate() throws(PatchSyncError) {
        guard minSize >= 64, minSize < averageSize, averageSize < maxSize,
            averageSize & (averageSize - 1) == 0, maxSize <= Self.largestChunk
        else {
            throw PatchSyncError(
                .usage, "chunk sizes \(minSize)/\(averageSize)/\(maxSize) are not usable",
                remedy: "use min < average < max, the average a power of two, max at most 64 MiB")
        }
    }
}
