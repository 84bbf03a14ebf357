internal import CZstd
import Foundation
import Synchronization

/// zstd frames (RFC 8878) of chunks and delta-pack segments, through libzstd. At level 3 it compresses
/// game data about as well as deflate at level 6 or better, some fourteen times as fast, and reads
/// several times as fast.
enum Zstd {
    /// The frame of `input` at `level` (1–22), with its content size in the header.
    static func compress(_ input: UnsafeRawBufferPointer, level: Int32) -> [UInt8] {
        // A context at a high level holds tables of many MiB: kept only for the fast levels of objects.
        Contexts.shared.with(pooled: level <= 9) { context in
            let bound = ZSTD_compressBound(input.count)
            var out = [UInt8](repeating: 0, count: bound)
            let length = out.withUnsafeMutableBytes { dst in
                ZSTD_compressCCtx(context, dst.baseAddress, bound, input.baseAddress, input.count, level)
            }
            precondition(ZSTD_isError(length) == 0, "ZSTD_compressCCtx: \(String(cString: ZSTD_getErrorName(length)))")
            out.removeSubrange(length...)
            return out
        }
    }

    /// zstd's frame magic, 0xFD2FB528 little-endian: how a stored chunk says it is zstd.
    static let magic: [UInt8] = [0x28, 0xB5, 0x2F, 0xFD]

    /// Whether `bytes` begin with a zstd frame.
    static func isFrame(_ bytes: UnsafeRawBufferPointer) -> Bool {
        bytes.count >= 4 && bytes[0] == magic[0] && bytes[1] == magic[1] && bytes[2] == magic[2] && bytes[3] == magic[3]
    }

    /// A decompression context kept for many chunks (one per worker thread: not thread-safe).
    final class Decoder {
        private let context: OpaquePointer

        init() {
            guard let context = ZSTD_createDCtx() else { fatalError("libzstd: out of memory") }
            // One-shot decompression (below) writes straight into the caller's buffer of the signed length
            // and allocates no window: a hostile frame cannot make it allocate more or write further.
            self.context = context
        }

        deinit { ZSTD_freeDCtx(context) }

        /// Decompresses one frame, which must be all of `input` and fill `output` exactly.
        func decompress(_ input: UnsafeRawBufferPointer, into output: UnsafeMutableRawBufferPointer) -> Bool {
            guard let source = input.baseAddress, let destination = output.baseAddress, Zstd.isFrame(input) else {
                return false
            }
            // One frame and nothing after it.
            let frame = ZSTD_findFrameCompressedSize(source, input.count)
            guard ZSTD_isError(frame) == 0, frame == input.count else { return false }
            let written = ZSTD_decompressDCtx(context, destination, output.count, source, input.count)
            return ZSTD_isError(written) == 0 && written == output.count
        }
    }

    /// Compression contexts reused across calls and threads: creating one costs more than compressing a
    /// small chunk.
    private final class Contexts: Sendable {
        static let shared = Contexts()
        private let idle = Mutex<[UInt]>([])

        func with<T>(pooled: Bool, _ body: (OpaquePointer) -> T) -> T {
            let reused = pooled ? idle.withLock { $0.popLast() } : nil
            guard let context = reused.flatMap({ OpaquePointer(bitPattern: $0) }) ?? ZSTD_createCCtx() else {
                fatalError("libzstd: out of memory")
            }
            defer {
                if pooled { idle.withLock { $0.append(UInt(bitPattern: context)) } } else { ZSTD_freeCCtx(context) }
            }
            return body(context)
        }
    }
}

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
