import Foundation

/// One page of a ListObjectsV2 answer (S3's `ListBucketResult` XML): each key with its size, and the
/// token of the next page. Read as text, element by element: S3 escapes `<` and `&` in keys, so an
/// element's tags never occur inside another's text.
struct S3Listing {
    /// The page's keys (whole, with the prefix), with their sizes in bytes, ETags (quotes removed) and
    /// when the store says it last wrote them (`LastModified` as written: read with ``date(_:)`` where
    /// needed, not for every object of a large bucket).
    var objects: [(key: String, size: Int64, etag: String?, modified: String?)] = []
    /// The NextContinuationToken of a truncated listing; nil on its last page.
    var next: String?

    /// Parses `body`, the answer to the request for `url`; refuses what is not such a page.
    init(parsing body: Data, from url: String) throws(PatchSyncError) {
        let text = String(decoding: body, as: UTF8.self)
        guard text.contains("<ListBucketResult") else {
            throw Self.refusal(url, "answered without a ListBucketResult")
        }
        var from = text.startIndex
        while let open = text.range(of: "<Contents>", range: from..<text.endIndex),
            let close = text.range(of: "</Contents>", range: open.upperBound..<text.endIndex)
        {
            let entry = String(text[open.upperBound..<close.lowerBound])
            guard let key = Self.element("Key", in: entry),
                let size = Self.element("Size", in: entry).flatMap({ Int64($0) })
            else {
                throw Self.refusal(url, "listed an object without a Key or a Size")
            }
            let etag = Self.element("ETag", in: entry).map {
                Self.unescape($0).trimmingCharacters(in: CharacterSet(charactersIn: "\""))
            }
            let modified = Self.element("LastModified", in: entry)
            objects.append((Self.unescape(key), size, etag, modified))
            from = close.upperBound
        }
        guard Self.element("IsTruncated", in: text) == "true" else { return }
        guard let token = Self.element("NextContinuationToken", in: text), !token.isEmpty else {
            throw Self.refusal(url, "answered a truncated listing without a NextContinuationToken")
        }
        next = Self.unescape(token)
    }

    /// A `LastModified` as S3 writes it (`2026-11-29T10:00:00.000Z`; fractional seconds optional).
    static func date(_ text: String) -> Date? {
        let formatter = ISO8601DateFormatter()
        formatter.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
        if let date = formatter.date(from: text) { return date }
        formatter.formatOptions = [.withInternetDateTime]
        return formatter.date(from: text)
    }

    private static func refusal(_ url: String, _ what: String) -> PatchSyncError {
        PatchSyncError(
            .refusedData, "listing \(url): the store \(what)",
            remedy: "check --endpoint: it should be an S3-compatible store that answers ListObjectsV2")
    }

    /// The text of the first `<name>` element of `text`, as written (escaped).
    static func element(_ name: String, in text: String) -> String? {
        guard let start = text.range(of: "<\(name)>"),
            let end = text.range(of: "</\(name)>", range: start.upperBound..<text.endIndex)
        else { return nil }
        return String(text[start.upperBound..<end.lowerBound])
    }

    /// `text` with XML's five named entities and its numeric character references replaced; an
    /// unknown entity is kept as written.
    static func unescape(_ text: String) -> String {
        var out = ""
        var rest = text[...]
        while let amp = rest.firstIndex(of: "&") {
            out.append(contentsOf: rest[..<amp])
            guard let semicolon = rest[amp...].firstIndex(of: ";") else {
                rest = rest[amp...]
                break
            }
            let reference = rest[rest.index(after: amp)..<semicolon]
            if let scalar = character(reference) {
                out.unicodeScalars.append(scalar)
            } else {
                out.append(contentsOf: rest[amp...semicolon])
            }
            rest = rest[rest.index(after: semicolon)...]
        }
        out.append(contentsOf: rest)
        return out
    }

    /// The character an entity or character reference (between `&` and `;`) stands for.
    private static func character(_ reference: Substring) -> Unicode.Scalar? {
        switch reference {
        case "amp": return "&"
        case "lt": return "<"
        case "gt": return ">"
        case "quot": return "\""
        case "apos": return "'"
        default:
            let number: UInt32?
            if reference.hasPrefix("#x") || reference.hasPrefix("#X") {
                number = UInt32(reference.dropFirst(2), radix: 16)
            } else if reference.hasPrefix("#") {
                number = UInt32(reference.dropFirst(), radix: 10)
            } else {
                number = nil
            }
            return number.flatMap { Unicode.Scalar($0) }
        }
    }
}
