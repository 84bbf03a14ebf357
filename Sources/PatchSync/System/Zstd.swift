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

    /// The frame of `input` compressed against `prefix` (zstd's `--patch-from`: the prefix is referenced,
    /// not stored), at `level`, with long-distance matching and a window that spans both: without a
    /// prefix, a large input's distant repeats are found too (`zstd --long`).
    static func compress(_ input: UnsafeRawBufferPointer, prefix: UnsafeRawBufferPointer?, level: Int32) -> [UInt8] {
        guard let context = ZSTD_createCCtx() else { fatalError("libzstd: out of memory") }
        defer { ZSTD_freeCCtx(context) }
        let span = (prefix?.count ?? 0) + input.count
        let window = Int32(max(10, min(31, Int.bitWidth - span.leadingZeroBitCount)))
        ZSTD_CCtx_setParameter(context, ZSTD_c_compressionLevel, level)
        ZSTD_CCtx_setParameter(context, ZSTD_c_windowLog, window)
        ZSTD_CCtx_setParameter(context, ZSTD_c_enableLongDistanceMatching, 1)
        if let prefix { ZSTD_CCtx_refPrefix(context, prefix.baseAddress, prefix.count) }
        let bound = ZSTD_compressBound(input.count)
        var out = [UInt8](repeating: 0, count: bound)
        let length = out.withUnsafeMutableBytes { dst in
            ZSTD_compress2(context, dst.baseAddress, bound, input.baseAddress, input.count)
        }
        precondition(ZSTD_isError(length) == 0, "ZSTD_compress2: \(String(cString: ZSTD_getErrorName(length)))")
        out.removeSubrange(length...)
        return out
    }

    /// The content of the one frame `input`, compressed against `prefix`, when its header states a size
    /// of at most `limit` bytes and it fills that size exactly; else nil. (Decoded in one go into a buffer
    /// of that size: no window is allocated, whatever the frame's.)
    static func decompressFrame(_ input: UnsafeRawBufferPointer, prefix: UnsafeRawBufferPointer?, limit: Int)
        -> [UInt8]?
    {
        guard limit >= 0, isFrame(input), let source = input.baseAddress, let context = ZSTD_createDCtx() else {
            return nil
        }
        defer { ZSTD_freeDCtx(context) }
        let size = ZSTD_getFrameContentSize(source, input.count)
        guard size <= UInt64(limit), ZSTD_findFrameCompressedSize(source, input.count) == input.count else {
            return nil
        }
        ZSTD_DCtx_setParameter(context, ZSTD_d_windowLogMax, 31)
        if let prefix { ZSTD_DCtx_refPrefix(context, prefix.baseAddress, prefix.count) }
        var out = [UInt8](repeating: 0, count: Int(size))
        let written = out.withUnsafeMutableBytes { dst in
            ZSTD_decompressDCtx(context, dst.baseAddress, dst.count, source, input.count)
        }
        return ZSTD_isError(written) == 0 && written == out.count ? out : nil
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
