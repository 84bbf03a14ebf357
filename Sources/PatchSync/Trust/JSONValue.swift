import Foundation

/// A JSON document as a value, with the canonical form TUF signs.
///
/// TUF signs the "canonical JSON" of a metadata's `signed` object (the OLPC form
/// that securesystemslib implements): object keys sorted by code point, no
/// whitespace, strings escaping only backslash and quote, integers only.
public indirect enum JSONValue: Hashable, Sendable, Codable {
    case object([String: JSONValue])
    case array([JSONValue])
    case string(String)
    case integer(Int64)
    case number(Double)
    case bool(Bool)
    case null

    public init(from decoder: any Decoder) throws {
        let c = try decoder.singleValueContainer()
        if c.decodeNil() {
            self = .null
        } else if let b = try? c.decode(Bool.self) {
            self = .bool(b)
        } else if let i = try? c.decode(Int64.self) {
            self = .integer(i)
        } else if let d = try? c.decode(Double.self) {
            self = .number(d)
        } else if let s = try? c.decode(String.self) {
            self = .string(s)
        } else if let a = try? c.decode([JSONValue].self) {
            self = .array(a)
        } else {
            self = .object(try c.decode([String: JSONValue].self))
        }
    }

    public func encode(to encoder: any Encoder) throws {
        var c = encoder.singleValueContainer()
        switch self {
        case .object(let o): try c.encode(o)
        case .array(let a): try c.encode(a)
        case .string(let s): try c.encode(s)
        case .integer(let i): try c.encode(i)
        case .number(let d): try c.encode(d)
        case .bool(let b): try c.encode(b)
        case .null: try c.encodeNil()
        }
    }

    /// Parses JSON text.
    static func parse(_ data: Data, what: String) throws(PatchSyncError) -> JSONValue {
        do { return try JSONDecoder().decode(JSONValue.self, from: data) } catch {
            throw PatchSyncError(.refusedData, "\(what) is not valid JSON", cause: error)
        }
    }

    /// The value of an Encodable, through its JSON form.
    static func from<T: Encodable>(_ value: T) throws(PatchSyncError) -> JSONValue {
        do {
            let data = try TUFCoding.encoder.encode(value)
            return try JSONDecoder().decode(JSONValue.self, from: data)
        } catch { throw PatchSyncError(.internal, "encoding \(T.self)", cause: error) }
    }

    /// Decodes this value as `T`, refusing it with a message naming `what` when it does not fit.
    func decode<T: Decodable>(_ type: T.Type, what: String) throws(PatchSyncError) -> T {
        do {
            let data = try JSONEncoder().encode(self)
            return try TUFCoding.decoder.decode(T.self, from: data)
        } catch { throw PatchSyncError(.refusedData, "\(what) does not have the expected form", cause: error) }
    }

    subscript(key: String) -> JSONValue? {
        if case .object(let o) = self { return o[key] }
        return nil
    }

    /// The canonical JSON bytes of this value; refuses non-integer numbers.
    func canonical() throws(PatchSyncError) -> [UInt8] {
        var out: [UInt8] = []
        try writeCanonical(into: &out)
        return out
    }

    private func writeCanonical(into out: inout [UInt8]) throws(PatchSyncError) {
        switch self {
        case .null: out += Array("null".utf8)
        case .bool(let b): out += Array((b ? "true" : "false").utf8)
        case .integer(let i): out += Array(String(i).utf8)
        case .number(let d):
            guard let i = Int64(exactly: d) else {
                throw PatchSyncError(.refusedData, "canonical JSON has no form for the number \(d)")
            }
            out += Array(String(i).utf8)
        case .string(let s): Self.writeString(s, into: &out)
        case .array(let items):
            out.append(UInt8(ascii: "["))
            for (n, item) in items.enumerated() {
                if n > 0 { out.append(UInt8(ascii: ",")) }
                try item.writeCanonical(into: &out)
            }
            out.append(UInt8(ascii: "]"))
        case .object(let members):
            out.append(UInt8(ascii: "{"))
            let sorted = members.sorted { $0.key.unicodeScalars.lexicographicallyPrecedes($1.key.unicodeScalars) }
            for (n, (key, value)) in sorted.enumerated() {
                if n > 0 { out.append(UInt8(ascii: ",")) }
                Self.writeString(key, into: &out)
                out.append(UInt8(ascii: ":"))
                try value.writeCanonical(into: &out)
            }
            out.append(UInt8(ascii: "}"))
        }
    }

    private static func writeString(_ s: String, into out: inout [UInt8]) {
        out.append(UInt8(ascii: "\""))
        for byte in s.utf8 {
            if byte == UInt8(ascii: "\"") || byte == UInt8(ascii: "\\") { out.append(UInt8(ascii: "\\")) }
            out.append(byte)
        }
        out.append(UInt8(ascii: "\""))
    }
}
