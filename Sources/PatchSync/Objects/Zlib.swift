internal import CZlib
import Foundation

/// zlib compression of chunks and gzip of manifests.
enum Zlib {
    /// compress2: the zlib (RFC 1950) form of `input`.
    static func deflate(_ input: UnsafeRawBufferPointer, level: Int32 = 6) -> [UInt8] {
        var length = compressBound(uLong(input.count))
        var out = [UInt8](repeating: 0, count: Int(length))
        let status = out.withUnsafeMutableBytes { dst in
            compress2(dst.baseAddress!.assumingMemoryBound(to: Bytef.self), &length,
                      input.baseAddress?.assumingMemoryBound(to: Bytef.self), uLong(input.count), level)
        }
        // compressBound guarantees room; Z_MEM_ERROR is the only other outcome.
        precondition(status == Z_OK, "compress2 failed with \(status)")
        out.removeSubrange(Int(length)...)
        return out
    }

    /// uncompress into `output`, which must be filled exactly: a stream that
    /// inflates to more or fewer bytes is refused, so a lying object cannot overrun it.
    static func inflate(_ input: UnsafeRawBufferPointer, into output: UnsafeMutableRawBufferPointer) -> Bool {
        Inflater().inflate(input, into: output)
    }

    /// A raw-deflate stream kept for many chunks (one per worker thread: not thread-safe), which
    /// skips the zlib trailer's Adler-32: a chunk's SHA-256 is checked after inflating anyway, and
    /// the checksum cost 10-15% of the inflate time here. The zlib header is still checked.
    final class Inflater {
        private var stream = z_stream()

        init() {
            let status = inflateInit2_(&stream, -15, zlibVersion(), Int32(MemoryLayout<z_stream>.size))
            precondition(status == Z_OK, "inflateInit2 failed with \(status)")  // only on out of memory
        }

        deinit { inflateEnd(&stream) }

        /// Inflates one zlib (RFC 1950) stream, which must fill `output` exactly and end with its
        /// 4-byte trailer, unchecked (see above).
        func inflate(_ input: UnsafeRawBufferPointer, into output: UnsafeMutableRawBufferPointer) -> Bool {
            guard input.count >= 6, let outStart = output.baseAddress, let inStart = input.baseAddress else {
                return false
            }
            let (cmf, flg) = (UInt32(input[0]), UInt32(input[1]))
            // deflate, window ≤ 32 KiB, header check bits, no preset dictionary (RFC 1950 §2.2)
            guard cmf & 0x0f == 8, cmf >> 4 <= 7, (cmf << 8 | flg) % 31 == 0, flg & 0x20 == 0 else { return false }
            guard inflateReset(&stream) == Z_OK else { return false }
            stream.next_in = UnsafeMutablePointer(mutating: inStart.assumingMemoryBound(to: Bytef.self) + 2)
            stream.avail_in = uInt(input.count - 6)
            stream.next_out = outStart.assumingMemoryBound(to: Bytef.self)
            stream.avail_out = uInt(output.count)
            let status = CZlib.inflate(&stream, Z_FINISH)
            return status == Z_STREAM_END && stream.avail_out == 0 && stream.avail_in == 0
        }
    }

    /// gzip (RFC 1952) of `data`, deterministic: no name and a zero time in the header.
    static func gzip(_ data: Data) -> Data {
        var stream = z_stream()
        var status = deflateInit2_(&stream, 9, Z_DEFLATED, 31, 8, Z_DEFAULT_STRATEGY,
                                   zlibVersion(), Int32(MemoryLayout<z_stream>.size))
        precondition(status == Z_OK, "deflateInit2 failed with \(status)")
        defer { deflateEnd(&stream) }
        let bound = Int(deflateBound(&stream, uLong(data.count))) + 64
        var out = [UInt8](repeating: 0, count: bound)
        var input = [UInt8](data)
        input.withUnsafeMutableBufferPointer { src in
            out.withUnsafeMutableBufferPointer { dst in
                stream.next_in = src.baseAddress
                stream.avail_in = uInt(src.count)
                stream.next_out = dst.baseAddress
                stream.avail_out = uInt(dst.count)
                status = CZlib.deflate(&stream, Z_FINISH)
            }
        }
        precondition(status == Z_STREAM_END, "deflate failed with \(status)")
        return Data(out[0..<Int(stream.total_out)])
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
                    output.append(dst.baseAddress!, count: dst.count - Int(stream.avail_out))
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
