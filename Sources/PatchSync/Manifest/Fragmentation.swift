/// How scattered a file's stored chunks may be (format 7).
///
/// A publish stores only the chunks no earlier build has, so a file changed in many places across many
/// releases ends up read from many places: each run of chunks that sit back to back in one object is
/// one range, and a fresh install asks for each range separately (neighbours are coalesced only when
/// they touch). A file whose chunks would span more than ``maxRanges(storedBytes:)`` ranges is stored
/// whole again (a consolidated copy, as Longtail's block-usage rule and git's repack do): its later
/// changes start from one range.
///
/// The bound is one range per ``bytesPerRange`` of the file's stored bytes, plus ``baseRanges``. The
/// default, 256 KiB (the average chunk), is measured (`Benchmarks/store.sh`, 10 releases each rewriting 3%
/// of four 64 MiB paks in 64 KiB–1 MiB regions): at 256 KiB no pak was stored whole again and the new
/// objects were 1.00× the chunks no earlier release had; at 1 MiB five copies and at 4 MiB 23 made the
/// uploads 3.9× and 10.4× the patch. The requests of a fresh install of the 10th release came mostly
/// mostly from the holes later releases left in the small files' first packs (422 at 4 MiB, where the
/// paks were copied whole again and again; 587 at 256 KiB; 13 for the build published alone), so a stricter bound buys few requests for much storage. At the default a file
/// is stored whole again only when its ranges average under 256 KiB of stored bytes: a compressible file
/// scattered chunk by chunk (an incompressible one's chunks average more); raise it to trade storage for
/// requests.
public struct Fragmentation: Sendable, Equatable {
    /// Stored bytes per range a file may span beyond ``baseRanges``.
    public var bytesPerRange: Int64
    /// Ranges any file may span.
    public var baseRanges: Int

    public init(bytesPerRange: Int64, baseRanges: Int = 2) {
        self.bytesPerRange = max(1, bytesPerRange)
        self.baseRanges = max(1, baseRanges)
    }

    /// The default (``bytesPerRange`` 256 KiB, two ranges for any file).
    public static let standard = Fragmentation(bytesPerRange: 256 << 10)

    /// The most ranges a file of `storedBytes` may span before it is stored whole again.
    public func maxRanges(storedBytes: Int64) -> Int {
        baseRanges + Int(min(Int64(Int.max / 2), storedBytes / bytesPerRange))
    }

    /// Whether a file stored as `chunks` may stay so: it spans no more than ``maxRanges(storedBytes:)``.
    public func allows(_ chunks: [ChunkEntry]) -> Bool {
        Self.ranges(chunks) <= maxRanges(storedBytes: chunks.reduce(Int64(0)) { $0 + Int64($1.objectLength) })
    }

    /// The ranges `chunks` span: runs of chunks back to back in one object (a chunk naming no object is in
    /// the file's own).
    public static func ranges(_ chunks: [ChunkEntry]) -> Int {
        var count = 0
        var previous: ChunkEntry? = nil
        for chunk in chunks {
            if let last = previous, last.object == chunk.object,
                last.objectOffset + Int64(last.objectLength) == chunk.objectOffset
            {
                previous = chunk
                continue
            }
            count += 1
            previous = chunk
        }
        return count
    }
}
