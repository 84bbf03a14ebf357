import Foundation

/// A delta: the instructions that rebuild one file of a new build (the target) from the same file of
/// an earlier build (the source), in the spirit of VCDIFF: ranges copied from the source, and
/// literal bytes that the source lacks.
///
/// Instructions, before the pack deflates them:
///
///     varint sourceSize, varint targetSize, then until the end:
///     0x00 varint n, n literal bytes                 add
///     0x01 zigzag-varint shift, varint n             copy n bytes of the source from
///                                                    (end of the previous copy + shift)
///
/// A delta is never trusted on its own: ``Delta/Reader`` checks every bound as it goes, and what it
/// produces is verified against the target's signed chunk hashes.
enum Delta {
    static let add: UInt8 = 0
    static let copy: UInt8 = 1

    /// Builds an instruction stream.
    struct Writer {
        private(set) var bytes: [UInt8] = []
        private var copyEnd: Int64 = 0

        init(sourceSize: Int64, targetSize: Int64) {
            Varint.append(UInt64(sourceSize), to: &bytes)
            Varint.append(UInt64(targetSize), to: &bytes)
        }

        mutating func add(_ literal: UnsafeRawBufferPointer) {
            guard !literal.isEmpty else { return }
            bytes.append(Delta.add)
            Varint.append(UInt64(literal.count), to: &bytes)
            bytes.append(contentsOf: literal)
        }

        mutating func copy(from offset: Int64, count: Int64) {
            bytes.append(Delta.copy)
            Varint.append(Varint.zigzag(offset - copyEnd), to: &bytes)
            Varint.append(UInt64(count), to: &bytes)
            copyEnd = offset + count
        }
    }

    /// What a delta does, one instruction at a time, with every bound checked.
    struct Reader {
        enum Instruction {
            case add(UnsafeRawBufferPointer)
            case copy(offset: Int64, count: Int64)
        }

        private let bytes: UnsafeRawBufferPointer
        private var position = 0
        private var copyEnd: Int64 = 0
        private var produced: Int64 = 0
        let sourceSize: Int64
        let targetSize: Int64

        /// Reads the header; nil when it is malformed.
        init?(_ bytes: UnsafeRawBufferPointer) {
            self.bytes = bytes
            guard let source = Varint.read(bytes, at: &position), let target = Varint.read(bytes, at: &position),
                  source <= UInt64(Int64.max), target <= UInt64(Int64.max) else { return nil }
            sourceSize = Int64(source)
            targetSize = Int64(target)
        }

        /// Every instruction has been read and the target is exactly as long as the header says.
        var isComplete: Bool { position == bytes.count && produced == targetSize }

        /// The next instruction, nil at the end; throws when the delta is malformed or out of bounds.
        mutating func next() throws(DeltaError) -> Instruction? {
            guard position < bytes.count else { return nil }
            let tag = bytes[position]
            position += 1
            switch tag {
            case Delta.add:
                guard let n = Varint.read(bytes, at: &position), n > 0, n <= UInt64(bytes.count - position),
                      Int64(n) <= targetSize - produced else { throw DeltaError("an add runs past the delta or the target") }
                let literal = UnsafeRawBufferPointer(rebasing: bytes[position..<(position + Int(n))])
                position += Int(n)
                produced += Int64(n)
                return .add(literal)
            case Delta.copy:
                guard let shift = Varint.read(bytes, at: &position), let n = Varint.read(bytes, at: &position),
                      n > 0, n <= UInt64(targetSize - produced) else { throw DeltaError("a copy runs past the target") }
                let (offset, overflow) = copyEnd.addingReportingOverflow(Varint.unzigzag(shift))
                guard !overflow, offset >= 0, offset <= sourceSize, Int64(n) <= sourceSize - offset else { throw DeltaError("a copy reads outside the source") }
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
    static func apply(_ instructions: UnsafeRawBufferPointer, to source: UnsafeRawBufferPointer) throws(DeltaError) -> [UInt8] {
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
