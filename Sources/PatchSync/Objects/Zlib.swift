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
        var length = uLong(output.count)
        var sourceLength = uLong(input.count)
        let status = uncompress2(output.baseAddress!.assumingMemoryBound(to: Bytef.self), &length,
                                 input.baseAddress!.assumingMemoryBound(to: Bytef.self), &sourceLength)
        return status == Z_OK && Int(length) == output.count && Int(sourceLength) == input.count
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
