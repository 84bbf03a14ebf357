internal import CLibCrypto
import Foundation

/// A SHA-256 digest, shown and stored as 64 lowercase hex digits.
public struct SHA256Digest: Hashable, Sendable, Comparable, CustomStringConvertible, Codable {
    /// The 32 bytes, as four big-endian words, held inline: a manifest of a million files holds three
    /// million digests, and a 64-character string each would be a heap allocation each.
    private let words: (UInt64, UInt64, UInt64, UInt64)

    /// The 64 lowercase hex digits.
    public var hex: String {
        withUnsafeBytes(of: (words.0.bigEndian, words.1.bigEndian, words.2.bigEndian, words.3.bigEndian)) {
            Hex.encode($0)
        }
    }

    /// Accepts exactly 64 lowercase hex digits.
    public init?(hex: String) {
        var w = (UInt64(0), UInt64(0), UInt64(0), UInt64(0))
        var count = 0
        for c in hex.utf8 {
            guard count < 64, let value = Hex.value(of: c), !(65...70).contains(c) else { return nil }
            switch count >> 4 {
            case 0: w.0 = w.0 << 4 | UInt64(value)
            case 1: w.1 = w.1 << 4 | UInt64(value)
            case 2: w.2 = w.2 << 4 | UInt64(value)
            default: w.3 = w.3 << 4 | UInt64(value)
            }
            count += 1
        }
        guard count == 64 else { return nil }
        words = w
    }

    /// From the digest's 32 bytes.
    init(bytes: UnsafeRawBufferPointer) {
        precondition(bytes.count == 32, "a SHA-256 digest has 32 bytes")
        func word(_ i: Int) -> UInt64 { UInt64(bigEndian: bytes.loadUnaligned(fromByteOffset: i * 8, as: UInt64.self)) }
        words = (word(0), word(1), word(2), word(3))
    }

    /// The 32 bytes.
    var bytes: [UInt8] {
        withUnsafeBytes(of: (words.0.bigEndian, words.1.bigEndian, words.2.bigEndian, words.3.bigEndian)) { Array($0) }
    }

    public var description: String { hex }
    public static func < (a: Self, b: Self) -> Bool {
        (a.words.0, a.words.1, a.words.2, a.words.3) < (b.words.0, b.words.1, b.words.2, b.words.3)
    }
    public static func == (a: Self, b: Self) -> Bool {
        a.words.0 == b.words.0 && a.words.1 == b.words.1 && a.words.2 == b.words.2 && a.words.3 == b.words.3
    }
    public func hash(into hasher: inout Hasher) {
        hasher.combine(words.0)
        hasher.combine(words.1)
        hasher.combine(words.2)
        hasher.combine(words.3)
    }

    /// The SHA-256 of `data`.
    public static func of(_ data: Data) -> SHA256Digest { SHA256Hasher.hash(data) }

    /// The SHA-256 of a file's content, read in bounded pieces.
    public static func of(file path: String) throws(PatchSyncError) -> SHA256Digest {
        do { return try SHA256Hasher.hash(file: path) } catch { throw PatchSyncError.wrap(error) }
    }

    public init(from decoder: any Decoder) throws {
        let text = try decoder.singleValueContainer().decode(String.self)
        guard let digest = SHA256Digest(hex: text) else {
            throw DecodingError.dataCorrupted(
                .init(
                    codingPath: decoder.codingPath,
                    debugDescription: "not a SHA-256 hex digest: \(text)"))
        }
        self = digest
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        try container.encode(hex)
    }
}

/// Streaming SHA-256 over OpenSSL's EVP interface (which uses the CPU's SHA instructions).
///
/// One value per thread of use; the EVP context is freed in deinit.
final class SHA256Hasher {
    private let context: OpaquePointer

    init() {
        // EVP_MD_CTX_new only fails on allocation failure, which Swift treats as fatal anyway.
        guard let context = EVP_MD_CTX_new() else { preconditionFailure("EVP_MD_CTX_new: out of memory") }
        self.context = context
        EVP_DigestInit_ex(context, EVP_sha256(), nil)
    }

    deinit { EVP_MD_CTX_free(context) }

    /// EVP_DigestUpdate.
    func update(_ bytes: UnsafeRawBufferPointer) {
        guard let base = bytes.baseAddress, bytes.count > 0 else { return }
        EVP_DigestUpdate(context, base, bytes.count)
    }

    func update(_ data: Data) { data.withUnsafeBytes { update($0) } }

    /// EVP_DigestFinal_ex; the hasher is reset for reuse.
    func finish() -> SHA256Digest {
        var out = [UInt8](repeating: 0, count: 32)
        var length: UInt32 = 0
        EVP_DigestFinal_ex(context, &out, &length)
        EVP_DigestInit_ex(context, EVP_sha256(), nil)
        return out.withUnsafeBytes { SHA256Digest(bytes: $0) }
    }

    /// The digest of one buffer.
    static func hash(_ bytes: UnsafeRawBufferPointer) -> SHA256Digest {
        var out = [UInt8](repeating: 0, count: 32)
        var length: UInt32 = 0
        EVP_Digest(bytes.baseAddress, bytes.count, &out, &length, EVP_sha256(), nil)
        return out.withUnsafeBytes { SHA256Digest(bytes: $0) }
    }

    static func hash(_ data: Data) -> SHA256Digest { data.withUnsafeBytes { hash($0) } }

    /// The SHA-512 of one buffer in hex: TUF metadata may pin files by it.
    static func sha512(_ data: Data) -> String {
        var out = [UInt8](repeating: 0, count: 64)
        var length: UInt32 = 0
        data.withUnsafeBytes { _ = EVP_Digest($0.baseAddress, $0.count, &out, &length, EVP_sha512(), nil) }
        return out.withUnsafeBytes { Hex.encode($0) }
    }

    /// The MD5 of a whole file in hex, streamed in bounded reads: S3 names a single PUT's body by it
    /// (its ETag), so `upload --verify` can tell a bucket's copy from the origin's without fetching it.
    static func md5(file path: String) throws(Errno) -> String {
        guard let context = EVP_MD_CTX_new() else { throw Errno(ENOMEM, "hashing (MD5)", path) }
        defer { EVP_MD_CTX_free(context) }
        guard EVP_DigestInit_ex(context, EVP_md5(), nil) == 1 else {
            throw Errno(ENOSYS, "hashing (OpenSSL offers no MD5)", path)
        }
        let file = try FileDescriptor(path: path, flags: O_RDONLY)
        var buffer = [UInt8](repeating: 0, count: 1 << 20)
        while true {
            let count = try file.read(into: &buffer)
            if count == 0 { break }
            buffer.withUnsafeBytes { _ = EVP_DigestUpdate(context, $0.baseAddress, count) }
        }
        var out = [UInt8](repeating: 0, count: 16)
        var length: UInt32 = 0
        EVP_DigestFinal_ex(context, &out, &length)
        return out.withUnsafeBytes { Hex.encode($0) }
    }

    /// The digest of a whole file, streamed in bounded reads.
    static func hash(file path: String) throws(Errno) -> SHA256Digest {
        let file = try FileDescriptor(path: path, flags: O_RDONLY)
        let hasher = SHA256Hasher()
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: 1 << 20, alignment: 16)
        defer { buffer.deallocate() }
        while true {
            let n = try file.read(into: buffer)
            if n == 0 { break }
            hasher.update(UnsafeRawBufferPointer(rebasing: buffer[0..<n]))
        }
        return hasher.finish()
    }
}

/// Hex encoding and decoding of bytes.
enum Hex {
    static func encode(_ bytes: UnsafeRawBufferPointer) -> String {
        String(unsafeUninitializedCapacity: bytes.count * 2) { out in
            for (i, b) in bytes.enumerated() {
                out[2 * i] = digit(b >> 4)
                out[2 * i + 1] = digit(b & 15)
            }
            return bytes.count * 2
        }
    }

    private static func digit(_ value: UInt8) -> UInt8 { value < 10 ? 48 + value : 87 + value }

    static func encode(_ bytes: [UInt8]) -> String { bytes.withUnsafeBytes { encode($0) } }

    static func value(of c: UInt8) -> UInt8? {
        switch c {
        case 48...57: return c - 48
        case 97...102: return c - 87
        case 65...70: return c - 55
        default: return nil
        }
    }

    /// Decodes hex digits; nil when the text is not hex.
    static func decode(_ text: String) -> [UInt8]? {
        let chars = Array(text.utf8)
        guard chars.count % 2 == 0 else { return nil }
        var out = [UInt8]()
        out.reserveCapacity(chars.count / 2)
        var i = 0
        while i < chars.count {
            guard let hi = value(of: chars[i]), let lo = value(of: chars[i + 1]) else { return nil }
            out.append(hi << 4 | lo)
            i += 2
        }
        return out
    }
}
