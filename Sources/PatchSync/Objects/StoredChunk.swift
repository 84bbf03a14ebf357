import Foundation

extension ChunkEntry {
    /// The chunk's content from its stored bytes (inflated into `scratch` when deflated), or nil
    /// unless it has exactly the signed length and SHA-256. `scratch` holds at least `length` bytes.
    func verifiedContent(
        of stored: UnsafeRawBufferPointer, scratch: UnsafeMutableRawBufferPointer,
        decompressor: Decompressor
    ) -> UnsafeRawBufferPointer? {
        var content = stored
        if codec != .raw {
            let target = UnsafeMutableRawBufferPointer(rebasing: scratch[0..<length])
            guard decompressor.decompress(stored, into: target, as: codec) else { return nil }
            content = UnsafeRawBufferPointer(target)
        }
        guard content.count == length, SHA256Hasher.hash(content) == sha256 else { return nil }
        return content
    }
}
