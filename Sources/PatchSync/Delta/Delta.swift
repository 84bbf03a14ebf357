import Foundation

/// A delta: the instructions that rebuild one file of a new build (the target) from the same file of
/// an earlier build (the source), in the spirit of VCDIFF: ranges copied from the source, and
/// literal bytes that the source lacks.
///
/// Like VCDIFF, a delta keeps three sections apart, so that each compresses with its own kind (the
/// literals with literals, the lengths with lengths):
///
///     varint sourceSize, varint targetSize, varint instructionBytes, varint addressBytes,
///     instructions:  0x00 varint n          add n literal bytes (the next n bytes of the literals)
///                    0x01 varint n          copy n bytes of the source from the next address
///     addresses:     zigzag-varint shift    from the end of the previous copy
///     literals:      the rest
///
/// A delta is never trusted on its own: ``Delta/Reader`` checks every bound as it goes, and what it
/// produces is verified against the target's signed chunk hashes.
enum Delta {
    static let add: UInt8 = 0
    static let copy: UInt8 = 1

    /// Builds a delta.
    struct Writer {
        private let sourceSize: Int64
        private let targetSize: Int64
        private var instructions: [UInt8] = []
        private var addresses: [UInt8] = []
        private var literals: [UInt8] = []
        private var copyEnd: Int64 = 0

        init(sourceSize: Int64, targetSize: Int64) {
            self.sourceSize = sourceSize
            self.targetSize = targetSize
        }

        /// The encoded delta.
        var bytes: [UInt8] {
            var out: [UInt8] = []
            for value in [UInt64(sourceSize), UInt64(targetSize), UInt64(instructions.count), UInt64(addresses.count)] {
                Varint.append(value, to: &out)
            }
            return out + instructions + addresses + literals
        }

        mutating func add(_ literal: UnsafeRawBufferPointer) {
            guard !literal.isEmpty else { return }
            instructions.append(Delta.add)
            Varint.append(UInt64(literal.count), to: &instructions)
            literals.append(contentsOf: literal)
        }

        mutating func copy(from offset: Int64, count: Int64) {
            instructions.append(Delta.copy)
            Varint.append(UInt64(count), to: &instructions)
            Varint.append(Varint.zigzag(offset - copyEnd), to: &addresses)
            copyEnd = offset + count
        }
    }

    /// What a delta does, one instruction at a time, with every bound checked.
    struct Reader {
        enum Instruction {
            case add(UnsafeRawBufferPointer)
            case copy(offset: Int64, count: Int64)
        }

        private let instructions: UnsafeRawBufferPointer
        private let addresses: UnsafeRawBufferPointer
        private let literals: UnsafeRawBufferPointer
        private var position = 0, address = 0, literal = 0
        private var copyEnd: Int64 = 0
        private var produced: Int64 = 0
        let sourceSize: Int64
        let targetSize: Int64

        /// Reads the header; nil when it is malformed.
        init?(_ bytes: UnsafeRawBufferPointer) {
            var at = 0
            guard let source = Varint.read(bytes, at: &at), let target = Varint.read(bytes, at: &at),
                let count = Varint.read(bytes, at: &at), let addressCount = Varint.read(bytes, at: &at),
                source <= UInt64(Int64.max), target <= UInt64(Int64.max),
                count <= UInt64(bytes.count - at), addressCount <= UInt64(bytes.count - at) - count
            else { return nil }
            sourceSize = Int64(source)
            targetSize = Int64(target)
            let split = at + Int(count), rest = split + Int(addressCount)
            instructions = UnsafeRawBufferPointer(rebasing: bytes[at..<split])
            addresses = UnsafeRawBufferPointer(rebasing: bytes[split..<rest])
            literals = UnsafeRawBufferPointer(rebasing: bytes[rest...])
        }

        /// Every section has been read and the target is exactly as long as the header says.
        var isComplete: Bool {
            position == instructions.count && address == addresses.count && literal == literals.count
                && produced == targetSize
        }

        /// The next instruction, nil at the end; throws when the delta is malformed or out of bounds.
        mutating func next() throws(DeltaError) -> Instruction? {
            guard position < instructions.count else { return nil }
            let tag = instructions[position]
            position += 1
            guard let n = Varint.read(instructions, at: &position), n > 0, n <= UInt64(targetSize - produced) else {
                throw DeltaError("an instruction runs past the target")
            }
            switch tag {
            case Delta.add:
                guard n <= UInt64(literals.count - literal) else { throw DeltaError("an add runs past the literals") }
                let bytes = UnsafeRawBufferPointer(rebasing: literals[literal..<(literal + Int(n))])
                literal += Int(n)
                produced += Int64(n)
                return .add(bytes)
            case Delta.copy:
                guard let shift = Varint.read(addresses, at: &address) else {
                    throw DeltaError("a copy has no address")
                }
                let (offset, overflow) = copyEnd.addingReportingOverflow(Varint.unzigzag(shift))
                guard !overflow, offset >= 0, offset <= sourceSize, Int64(n) <= sourceSize - offset else {
                    throw DeltaError("a copy reads outside the source")
                }
                copyEnd = offset + Int64(n)
                produced += Int64(n)
                return .copy(offset: offset, count: Int64(n))
            default:
                throw DeltaError("unknown instruction \(tag)")
            }
        }
    }
}

extension Delta {
    /// Runs `instructions` against `source` in memory (small files such as manifests): the target, or
    /// why the delta does not fit the source.
    static func apply(_ instructions: UnsafeRawBufferPointer, to source: UnsafeRawBufferPointer) throws(DeltaError)
        -> [UInt8]
    {
        guard var reader = Reader(instructions) else { throw DeltaError("its header is malformed") }
        guard reader.sourceSize == Int64(source.count) else { throw DeltaError("its source has another size") }
        var target: [UInt8] = []
        target.reserveCapacity(Int(min(reader.targetSize, 1 << 30)))
        while let instruction = try reader.next() {
            switch instruction {
            case .add(let literal): target.append(contentsOf: literal)
            case .copy(let offset, let count): target.append(contentsOf: source[Int(offset)..<Int(offset + count)])
            }
        }
        guard reader.isComplete else { throw DeltaError("it ends before the target does") }
        return target
    }
}

/// Why a delta cannot be applied.
struct DeltaError: Error, CustomStringConvertible, Equatable {
    let description: String
    init(_ description: String) { self.description = description }
}

/// LEB128 unsigned varints and zigzag signed ones.
enum Varint {
    static func append(_ value: UInt64, to bytes: inout [UInt8]) {
        var v = value
        while v >= 0x80 {
            bytes.append(UInt8(v & 0x7f) | 0x80)
            v >>= 7
        }
        bytes.append(UInt8(v))
    }

    /// Reads one varint at `position`, advancing it; nil when truncated or longer than 64 bits.
    static func read(_ bytes: UnsafeRawBufferPointer, at position: inout Int) -> UInt64? {
        var value: UInt64 = 0
        var shift: UInt64 = 0
        while position < bytes.count, shift < 64 {
            let byte = bytes[position]
            position += 1
            value |= UInt64(byte & 0x7f) << shift
            if byte < 0x80 { return value }
            shift += 7
        }
        return nil
    }

    static func zigzag(_ v: Int64) -> UInt64 { UInt64(bitPattern: (v << 1) ^ (v >> 63)) }
    static func unzigzag(_ v: UInt64) -> Int64 { Int64(bitPattern: v >> 1) ^ -Int64(bitPattern: v & 1) }
}
