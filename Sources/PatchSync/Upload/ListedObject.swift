import Foundation

/// An object as a bucket's listing gives it: its size and ETag.
struct ListedObject: Sendable, Equatable {
    var size: Int64
    var etag: String?

    /// Whether the bucket holds exactly the local file `path` of `bytes` bytes: the same size, and an
    /// ETag that is the MD5 of the same bytes. S3 and the stores like it make a single PUT's ETag the
    /// MD5 of its body; a store whose ETag is no plain MD5 (a multipart upload's `…-N`, SSE-KMS) is
    /// judged by size alone, as nothing else is listed. A file that cannot be read is taken as different.
    func holds(_ path: String, bytes: Int64) -> Bool {
        guard size == bytes else { return false }
        guard let etag, etag.count == 32, etag.allSatisfy(\.isHexDigit) else { return true }
        guard let md5 = try? SHA256Hasher.md5(file: path) else { return false }
        return md5 == etag.lowercased()
    }
}
