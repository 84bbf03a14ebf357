import Foundation

/// An object as a bucket's listing gives it: its size, ETag and when the store says it last wrote it
/// (`LastModified` as written; ``S3Listing/date(_:)`` reads it).
struct ListedObject: Sendable, Equatable {
    var size: Int64
    var etag: String?
    var modified: String? = nil

    /// Whether the bucket holds exactly the local file `path` of `bytes` bytes: the same size and, where
    /// the store's ETags are MD5s of the bytes (`etagIsMD5`), an ETag that is the MD5 of the same bytes.
    /// A file that cannot be hashed is judged by its size.
    func holds(_ path: String, bytes: Int64, etagIsMD5: Bool) -> Bool {
        guard size == bytes else { return false }
        guard etagIsMD5, let etag = Self.plainMD5(etag) else { return true }
        guard let md5 = try? SHA256Hasher.md5(file: path) else { return true }
        return md5 == etag
    }

    /// `etag` as lowercase hex when it has an MD5's form (32 hex digits; a multipart upload's `…-N` has not).
    static func plainMD5(_ etag: String?) -> String? {
        guard let etag, etag.count == 32, etag.allSatisfy(\.isHexDigit) else { return nil }
        return etag.lowercased()
    }

    /// Whether a store's ETags are MD5s of the bytes, as S3 makes a single PUT's without SSE-KMS: true when
    /// one of the (up to 5) smallest listed files the same size as the local copy in `root` has the
    /// local copy's MD5 as its ETag. Stores that encrypt with KMS, or name bodies otherwise, give 32 hex
    /// digits that are no MD5: their files are judged by size alone, never all sent again.
    static func etagsAreMD5(_ listed: [String: ListedObject], files: [(path: String, bytes: Int64)], root: OriginLayout)
        -> Bool
    {
        let samples = files.filter { file in
            listed[file.path].map { $0.size == file.bytes && plainMD5($0.etag) != nil } ?? false
        }.sorted { $0.bytes < $1.bytes }.prefix(5)
        return samples.contains { file in
            (try? SHA256Hasher.md5(file: root.path(file.path))) == plainMD5(listed[file.path]?.etag)
        }
    }
}
