import Foundation

/// Computes a delta from a source to a target: an index of the source's blocks, then one pass over
/// the target taking the longest match at each position (greedy), extended both ways.
///
/// The index holds one entry per `stride` bytes of the source in a fixed table of at most
/// ``maxTableEntries`` slots, so memory stays bounded whatever the file size; the stride grows
/// with the source so that the table stays sparse. Before the index, each position tries the
/// source offset that follows the previous copy: a byte substituted in place (a timestamp
/// rewritten inside an asset) costs only the changed bytes.
struct DeltaEncoder {
    /// Bytes a match must have: shorter ones are sent as literals.
    static let block = 16
    /// The most slots the index table takes (4 bytes each).
    static let maxTableEntries = 1 << 22

    private let source: UnsafeRawBufferPointer
    private let stride: Int
    private let shift: UInt64
    private var table: [Int32]

    /// Indexes `source`, which must stay valid while the encoder is used (at most 2 GiB).
    init(source: UnsafeRawBufferPointer) {
        precondition(source.count < Int(Int32.max), "delta sources are at most 2 GiB")
        self.source = source
        let blocks = max(1, source.count / Self.block)
        stride = Self.block * max(1, (blocks * 2 + Self.maxTableEntries - 1) / Self.maxTableEntries)
        var slots = 1 << 10
        while slots < min(Self.maxTableEntries, max(1, source.count / stride) * 2) { slots <<= 1 }
        shift = UInt64(64 - slots.trailingZeroBitCount)
        table = [Int32](repeating: -1, count: slots)
        guard let base = source.baseAddress, source.count >= Self.block else { return }
        var p = 0
        while p + Self.block <= source.count {
            let slot = Int(Self.hash(base + p) >> shift)
            if table[slot] < 0 { table[slot] = Int32(p) }  // the first occurrence wins
            p += stride
        }
    }

    /// The delta's instructions that rebuild `target`.
    func encode(target: UnsafeRawBufferPointer) -> [UInt8] {
        var writer = Delta.Writer(sourceSize: Int64(source.count), targetSize: Int64(target.count))
        guard let t = target.baseAddress else { return writer.bytes }
        let n = target.count
        var i = 0, literalStart = 0, copyEnd = 0
        while i + Self.block <= n {
            guard
                let (start, offset, length) = match(
                    at: i, in: t, count: n, literalStart: literalStart,
                    predicted: copyEnd + (i - literalStart))
            else {
                i += 1
                continue
            }
            writer.add(UnsafeRawBufferPointer(start: t + literalStart, count: start - literalStart))
            writer.copy(from: Int64(offset), count: Int64(length))
            i = start + length
            literalStart = i
            copyEnd = offset + length
        }
        writer.add(UnsafeRawBufferPointer(start: t + literalStart, count: n - literalStart))
        return writer.bytes
    }

    /// The match at target position `i`: the predicted source offset first, then the index;
    /// extended backwards into the pending literals. Returns (target start, source offset, length).
    private func match(
        at i: Int, in t: UnsafeRawPointer, count n: Int, literalStart: Int,
        predicted: Int
    ) -> (Int, Int, Int)? {
        guard let s = source.baseAddress else { return nil }
        var candidate = -1
        if predicted + Self.block <= source.count, Self.equal16(s + predicted, t + i) {
            candidate = predicted
        } else {
            let slot = Int(Self.hash(t + i) >> shift)
            let p = Int(table[slot])
            guard p >= 0, Self.equal16(s + p, t + i) else { return nil }
            candidate = p
        }
        var length = Self.block
        let limit = min(source.count - candidate, n - i)
        while length + 8 <= limit,
            (s + candidate + length).loadUnaligned(as: UInt64.self) == (t + i + length).loadUnaligned(as: UInt64.self)
        {
            length += 8
        }
        while length < limit,
            s.load(fromByteOffset: candidate + length, as: UInt8.self)
                == t.load(fromByteOffset: i + length, as: UInt8.self)
        {
            length += 1
        }
        var start = i
        while start > literalStart, candidate > 0,
            s.load(fromByteOffset: candidate - 1, as: UInt8.self) == t.load(fromByteOffset: start - 1, as: UInt8.self)
        {
            start -= 1
            candidate -= 1
            length += 1
        }
        return (start, candidate, length)
    }

    @inline(__always)
    private static func hash(_ p: UnsafeRawPointer) -> UInt64 {
        let a = p.loadUnaligned(as: UInt64.self), b = p.loadUnaligned(fromByteOffset: 8, as: UInt64.self)
        return ((a &* 0x9E37_79B9_7F4A_7C15) ^ (b &* 0xC2B2_AE3D_27D4_EB4F)) &* 0x1656_67B1_9E37_79F9
    }

    @inline(__always)
    private static func equal16(_ a: UnsafeRawPointer, _ b: UnsafeRawPointer) -> Bool {
        a.loadUnaligned(as: UInt64.self) == b.loadUnaligned(as: UInt64.self)
            && a.loadUnaligned(fromByteOffset: 8, as: UInt64.self)
                == b.loadUnaligned(fromByteOffset: 8, as: UInt64.self)
    }
}
