import Foundation

/// How a publish compresses objects, packs and delta packs: zstd (the default) or deflate (zlib
/// streams, for origins read by older clients), each at a level.
public struct ObjectCodec: Sendable, Hashable, CustomStringConvertible {
    public enum Kind: String, Sendable, CaseIterable { case zstd, deflate }
    public var kind: Kind
    public var level: Int32

    /// zstd at level 3: Wesnoth's data at 0.693 of its size (deflate -6: 0.721) at 313 MB/s per core
    /// (deflate -6: 23 MB/s).
    public static let `default` = ObjectCodec(kind: .zstd, level: 3)
    public static let deflate = ObjectCodec(kind: .deflate, level: 6)

    public init(kind: Kind, level: Int32) {
        self.kind = kind
        self.level = level
    }

    /// `zstd`, `deflate`, `zstd:9`, `deflate:9`.
    public init(parsing text: String) throws(PatchSyncError) {
        let parts = text.split(separator: ":", maxSplits: 1).map(String.init)
        let levels: ClosedRange<Int32>
        switch parts.first {
        case "zstd": (kind, level, levels) = (.zstd, 3, 1...19)
        case "deflate": (kind, level, levels) = (.deflate, 6, 1...12)
        default:
            throw PatchSyncError(
                .usage, "'\(text)' is not a codec",
                remedy: "use zstd or deflate, with a level if you like: zstd:9, deflate:6")
        }
        if parts.count == 2 {
            guard let level = Int32(parts[1]), levels.contains(level) else {
                throw PatchSyncError(
                    .usage, "'\(parts[1])' is not a level of \(kind.rawValue)",
                    remedy:
                        "use \(levels.lowerBound)–\(levels.upperBound), e.g. \(kind.rawValue):\(kind == .zstd ? 9 : 6)")
            }
            self.level = level
        }
    }

    public var description: String { "\(kind.rawValue):\(level)" }

    /// The chunk codec its output is recorded as.
    var chunkCodec: ChunkCodec { kind == .zstd ? .zstd : .zlib }

    /// `input` compressed.
    func compress(_ input: UnsafeRawBufferPointer) -> [UInt8] {
        kind == .zstd ? Zstd.compress(input, level: level) : Zlib.deflate(input, level: level)
    }
}

/// Decompresses stored chunks and delta-pack segments of either codec, which each says by its first
/// bytes (zstd's frame magic, or a zlib header); one per worker thread.
final class Decompressor {
    private let zlib = Zlib.Inflater()
    private let zstd = Zstd.Decoder()

    /// The codec `bytes` hold, by their first bytes: zstd's frame magic, or a zlib header (deflate
    /// method, a window of at most 32 KiB, check bits that make the first two bytes a multiple of 31).
    static func detect(_ bytes: UnsafeRawBufferPointer) -> ChunkCodec? {
        if Zstd.isFrame(bytes) { return .zstd }
        guard bytes.count >= 2, bytes[0] & 0x0F == 8, bytes[0] >> 4 <= 7,
            (UInt16(bytes[0]) << 8 | UInt16(bytes[1])) % 31 == 0
        else {
            return nil
        }
        return .zlib
    }

    /// Decompresses `input` into all of `output`; the bytes must be of `codec` (nil: whichever they say).
    func decompress(
        _ input: UnsafeRawBufferPointer, into output: UnsafeMutableRawBufferPointer, as codec: ChunkCodec? = nil
    ) -> Bool {
        let detected = Self.detect(input)
        guard let detected, codec == nil || codec == detected else { return false }
        switch detected {
        case .zstd: return zstd.decompress(input, into: output)
        case .zlib: return zlib.inflate(input, into: output)
        case .raw: return false
        }
    }
}
