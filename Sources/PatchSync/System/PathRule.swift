import Foundation

/// The one rule for a path inside a build, applied to its UTF-8 bytes the way the kernel reads
/// them, and shared by publish, the client's manifest check, ``LinkResolver`` and staging (so what
/// one accepts the other accepts).
///
/// A path is relative, at most 4096 bytes, and made of components split on the byte `/`; each is
/// 1 to 255 bytes, not `.` or `..`, holds no NUL or backslash, is in Unicode NFC, and does not start
/// with a combining mark (which would fuse with the `/` before it wherever text is split by
/// characters). Comparisons for case-insensitive disks use ``folded(_:)``.
enum PathRule {
    /// The components of `path`, split on the byte `/` (empty ones dropped).
    static func components(_ path: String) -> [String] {
        path.utf8.split(separator: UInt8(ascii: "/")).map { String(decoding: $0, as: UTF8.self) }
    }

    /// The folder part (before the last byte `/`, "" for none) and the last component.
    static func split(_ path: String) -> (folder: String, name: String) {
        guard let slash = path.utf8.lastIndex(of: UInt8(ascii: "/")) else { return ("", path) }
        // Sliced as bytes: a name may start with a combining mark that joins the slash into one Character.
        return (
            String(decoding: path.utf8[..<slash], as: UTF8.self),
            String(decoding: path.utf8[path.utf8.index(after: slash)...], as: UTF8.self)
        )
    }

    /// The folders that hold `path`, innermost last ("a", "a/b" for "a/b/c").
    static func ancestors(_ path: String) -> [String] {
        var result: [String] = []
        var index = path.utf8.startIndex
        while let slash = path.utf8[index...].firstIndex(of: UInt8(ascii: "/")) {
            result.append(String(decoding: path.utf8[..<slash], as: UTF8.self))
            index = path.utf8.index(after: slash)
        }
        return result
    }

    /// A component a file operation may use: not empty, `.` or `..`, and without `/` or NUL.
    static func isPlainComponent(_ component: String) -> Bool {
        !component.isEmpty && component != "." && component != ".."
            && !component.utf8.contains(UInt8(ascii: "/")) && !component.utf8.contains(0)
    }

    /// Why `path` breaks the rule, or nil when it keeps it. One pass over its bytes; a component of plain
    /// ASCII (NFC, and no mark to start with) costs no Unicode work.
    static func problem(_ path: String) -> String? {
        var path = path
        return path.withUTF8 { bytes -> String? in
            guard !bytes.isEmpty, bytes.count <= 4096 else { return "is empty or longer than 4096 bytes" }
            guard !bytes.contains(where: { $0 == 0 || $0 == UInt8(ascii: "\\") }) else {
                return "holds a NUL or a backslash"
            }
            var start = 0, ascii = true
            for i in 0...bytes.count {
                let byte = i < bytes.count ? bytes[i] : UInt8(ascii: "/")
                guard byte == UInt8(ascii: "/") else {
                    if byte >= 0x80 { ascii = false }
                    continue
                }
                if let problem = componentProblem(UnsafeBufferPointer(rebasing: bytes[start..<i]), ascii: ascii) {
                    return problem
                }
                (start, ascii) = (i + 1, true)
            }
            return nil
        }
    }

    private static func componentProblem(_ component: UnsafeBufferPointer<UInt8>, ascii: Bool) -> String? {
        guard !component.isEmpty, component.count <= 255 else { return "has an empty component or one over 255 bytes" }
        guard !component.elementsEqual(".".utf8), !component.elementsEqual("..".utf8) else {
            return "has a '.' or '..' component"
        }
        if ascii { return nil }
        let text = String(decoding: component, as: UTF8.self)
        if let first = text.unicodeScalars.first, isCombiningMark(first) {
            return
                "has a component that starts with a combining mark (U+\(String(first.value, radix: 16, uppercase: true)))"
        }
        guard text.precomposedStringWithCanonicalMapping.utf8.elementsEqual(component) else {
            return "has a component that is not in Unicode NFC"
        }
        return nil
    }

    /// Whether `scalar` is a combining mark (general category Mn, Mc or Me).
    static func isCombiningMark(_ scalar: Unicode.Scalar) -> Bool {
        switch scalar.properties.generalCategory {
        case .nonspacingMark, .spacingMark, .enclosingMark: return true
        default: return false
        }
    }

    /// The key under which two paths are one on a case-insensitive disk.
    static func folded(_ path: String) -> String { path.lowercased() }
}
