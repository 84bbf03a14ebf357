import Foundation

/// FastCDC content-defined chunking with a gear hash and normalised chunking.
///
/// A cut point depends only on the bytes before it (at most `maxSize` of
/// them), so an insert or delete in a file moves only the cuts around it.
/// Normalised chunking uses a stricter mask before the average size and a
/// looser one after it, which narrows the spread of chunk sizes.
public struct Chunker: Sendable {
    public let parameters: ChunkingParameters
    private let strictMask: UInt64
    private let looseMask: UInt64

    public init(_ parameters: ChunkingParameters = .standard) throws(PatchSyncError) {
        try parameters.validate()
        self.parameters = parameters
        let bits = parameters.averageSize.trailingZeroBitCount
        strictMask = ~UInt64(0) << UInt64(64 - (bits + 2))
        looseMask = ~UInt64(0) << UInt64(64 - (bits - 2))
    }

    /// The length of the first chunk of `data` (all of it when it is the tail of a file).
    public func cutPoint(_ data: UnsafeRawBufferPointer) -> Int {
        var length = data.count
        if length <= parameters.minSize { return length }
        if length > parameters.maxSize { length = parameters.maxSize }
        let normal = min(length, parameters.averageSize)
        let bytes = data.bindMemory(to: UInt8.self)
        return Gear.table.withUnsafeBufferPointer { gear in
            var hash: UInt64 = 0
            var i = parameters.minSize
            while i < normal {
                hash = (hash &<< 1) &+ gear[Int(bytes[i])]
                if hash & strictMask == 0 { return i + 1 }
                i += 1
            }
            while i < length {
                hash = (hash &<< 1) &+ gear[Int(bytes[i])]
                if hash & looseMask == 0 { return i + 1 }
                i += 1
            }
            return length
        }
    }

    /// Calls `body` with each chunk of `bytes` (a whole file read once) and its offset, in order.
    func forEachChunk(
        of bytes: UnsafeRawBufferPointer,
        _ body: (UnsafeRawBufferPointer, Int64) throws(PatchSyncError) -> Void
    ) throws(PatchSyncError) {
        var start = 0
        while start < bytes.count {
            let window = UnsafeRawBufferPointer(rebasing: bytes[start...])
            let length = cutPoint(window)
            try body(UnsafeRawBufferPointer(rebasing: window[0..<length]), Int64(start))
            start += length
        }
    }

    /// Streams `file` and calls `body` with each chunk's bytes and offset, in order.
    /// Memory stays bounded by a buffer of a few times the maximum chunk size.
    func forEachChunk(
        of file: FileDescriptor,
        _ body: (UnsafeRawBufferPointer, Int64) throws(PatchSyncError) -> Void
    ) throws(PatchSyncError) {
        let capacity = max(4 << 20, parameters.maxSize * 2)
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: capacity, alignment: 16)
        defer { buffer.deallocate() }
        var start = 0, end = 0, offset: Int64 = 0, atEnd = false
        while true {
            if !atEnd && end - start < parameters.maxSize {
                if start > 0 {
                    UnsafeMutableRawBufferPointer(rebasing: buffer[0..<(end - start)])
                        .copyMemory(from: UnsafeRawBufferPointer(rebasing: buffer[start..<end]))
                    end -= start
                    start = 0
                }
                let n: Int
                do { n = try file.readFully(into: UnsafeMutableRawBufferPointer(rebasing: buffer[end...])) } catch {
                    throw PatchSyncError.wrap(error)
                }
                end += n
                atEnd = end < capacity
            }
            if start == end { return }
            let window = UnsafeRawBufferPointer(rebasing: buffer[start..<end])
            let length = cutPoint(window)
            try body(UnsafeRawBufferPointer(rebasing: window[0..<length]), offset)
            start += length
            offset += Int64(length)
        }
    }
}

/// The gear table: 256 fixed pseudo-random 64-bit values (SplitMix64 from a fixed seed).
/// Changing it changes every cut point, so it is part of the object format.
enum Gear {
    static let table: [UInt64] = {
        var state: UInt64 = 0x5041_5443_4853_594E  // "PATCHSYN"
        return (0..<256).map { _ in
            state &+= 0x9E37_79B9_7F4A_7C15
            var z = state
            z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
            z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
            return z ^ (z >> 31)
        }
    }()
}
