internal import CLibDeflate
internal import CZlib
import Foundation
import Synchronization

/// zlib streams (RFC 1950) of chunks, through libdeflate (about twice zlib's speed both ways here, and
/// the same format: zlib reads what it writes), and gzip of manifests through zlib.
enum Zlib {
    /// The zlib (RFC 1950) form of `input` at `level` (1–12; 6 is zlib's default, and libdeflate's
    /// level 6 compresses a little better than zlib's).
    static func deflate(_ input: UnsafeRawBufferPointer, level: Int32 = 6) -> [UInt8] {
        Compressors.shared.with(level: level) { compressor in
            let bound = libdeflate_zlib_compress_bound(compressor, input.count)
            var out = [UInt8](repeating: 0, count: bound)
            let length = out.withUnsafeMutableBytes { dst in
                libdeflate_zlib_compress(compressor, input.baseAddress, input.count, dst.baseAddress, bound)
            }
            precondition(length > 0, "libdeflate_zlib_compress had too little room")  // the bound guarantees room
            out.removeSubrange(length...)
            return out
        }
    }

    /// Inflates into `output`, which must be filled exactly by one whole stream: a stream that inflates
    /// to more or fewer bytes, or is followed by more input, is refused, so a lying object cannot overrun it.
    static func inflate(_ input: UnsafeRawBufferPointer, into output: UnsafeMutableRawBufferPointer) -> Bool {
        Inflater().inflate(input, into: output)
    }

    /// A libdeflate decompressor kept for many chunks (one per worker thread: not thread-safe).
    final class Inflater {
        private let decompressor: OpaquePointer

        init() {
            guard let decompressor = libdeflate_alloc_decompressor() else { fatalError("libdeflate: out of memory") }
            self.decompressor = decompressor
        }

        deinit { libdeflate_free_decompressor(decompressor) }

        /// Inflates one zlib (RFC 1950) stream, header and Adler-32 checked, which must be all of
        /// `input` and fill `output` exactly.
        func inflate(_ input: UnsafeRawBufferPointer, into output: UnsafeMutableRawBufferPointer) -> Bool {
            guard let inStart = input.baseAddress, let outStart = output.baseAddress else { return false }
            var consumed = 0
            let status = libdeflate_zlib_decompress_ex(
                decompressor, inStart, input.count, outStart, output.count,
                &consumed, nil)
            return status == LIBDEFLATE_SUCCESS && consumed == input.count
        }
    }

    /// libdeflate compressors by level, reused across calls and threads: allocating one costs more
    /// than compressing a small chunk.
    private final class Compressors: Sendable {
        static let shared = Compressors()
        private let idle = Mutex<[Int32: [UInt]]>([:])

        func with<T>(level: Int32, _ body: (OpaquePointer) -> T) -> T {
            let level = min(max(level, 1), 12)
            let reused = idle.withLock { $0[level]?.popLast() }
            guard
                let compressor = reused.flatMap({ OpaquePointer(bitPattern: $0) }) ?? libdeflate_alloc_compressor(level)
            else {
                fatalError("libdeflate: out of memory")
            }
            defer { idle.withLock { $0[level, default: []].append(UInt(bitPattern: compressor)) } }
            return body(compressor)
        }
    }

    /// gzip (RFC 1952) of `data`, deterministic (a zero time in the header), by libdeflate: on
    /// Wesnoth's 7.8 MB manifest, level 9 gives 1,091,584 bytes in 0.28 s where zlib's level 9 gave
    /// 1,200,238 in 0.35 s, and level 6 gives 1,126,938 bytes in 0.08 s.
    static func gzip(_ data: Data, level: Int32 = 9) -> Data {
        Compressors.shared.with(level: level) { compressor in
            let bound = libdeflate_gzip_compress_bound(compressor, data.count)
            var out = [UInt8](repeating: 0, count: bound)
            let length = data.withUnsafeBytes { src in
                out.withUnsafeMutableBytes { dst in
                    libdeflate_gzip_compress(compressor, src.baseAddress, src.count, dst.baseAddress, bound)
                }
            }
            precondition(length > 0, "libdeflate_gzip_compress had too little room")  // the bound guarantees room
            return Data(out[..<length])
        }
    }

    /// gunzip of `data`, refusing output larger than `limit` bytes or a damaged stream.
    static func gunzip(_ data: Data, limit: Int, what: String) throws(PatchSyncError) -> Data {
        var stream = z_stream()
        guard inflateInit2_(&stream, 31, zlibVersion(), Int32(MemoryLayout<z_stream>.size)) == Z_OK else {
            throw PatchSyncError(.internal, "inflateInit2 failed")
        }
        defer { inflateEnd(&stream) }
        var input = [UInt8](data)
        var output = Data()
        var buffer = [UInt8](repeating: 0, count: 256 * 1024)
        var status = Z_OK
        input.withUnsafeMutableBufferPointer { src in
            stream.next_in = src.baseAddress
            stream.avail_in = uInt(src.count)
            while status == Z_OK && output.count <= limit {
                buffer.withUnsafeMutableBufferPointer { dst in
                    stream.next_out = dst.baseAddress
                    stream.avail_out = uInt(dst.count)
                    status = CZlib.inflate(&stream, Z_NO_FLUSH)
                    output.append(contentsOf: dst[0..<(dst.count - Int(stream.avail_out))])
                }
            }
        }
        guard output.count <= limit else {
            throw PatchSyncError(.refusedData, "\(what) inflates to more than \(limit) bytes")
        }
        guard status == Z_STREAM_END, stream.avail_in == 0 else {
            throw PatchSyncError(.refusedData, "\(what) is not a valid gzip stream (zlib status \(status))")
        }
        return output
    }
}
