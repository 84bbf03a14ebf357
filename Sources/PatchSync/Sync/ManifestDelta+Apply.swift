import Foundation

extension ManifestDelta {
    /// The encoded manifest that this delta's object, `stored`, builds from `old` (the live build's).
    func apply(stored: Data, to old: Data) throws(PatchSyncError) -> Data {
        let delta = self
        switch codec {
        case "zstd":
            let rebuilt = stored.withUnsafeBytes { s in
                old.withUnsafeBytes { Zstd.decompressFrame(s, prefix: $0, limit: Int(delta.jsonLength)) }
            }
            guard let rebuilt else {
                throw PatchSyncError(
                    .refusedData, "the manifest delta \(delta.object) is not a zstd frame of its length")
            }
            return Data(rebuilt)
        case nil:
            var instructions = [UInt8](repeating: 0, count: delta.size)
            let inflated = stored.withUnsafeBytes { s in
                instructions.withUnsafeMutableBytes { Zlib.inflate(s, into: $0) }
            }
            guard inflated else {
                throw PatchSyncError(.refusedData, "the manifest delta \(delta.object) does not inflate")
            }
            let applied = instructions.withUnsafeBytes { i in
                old.withUnsafeBytes { o in Result { () throws(DeltaError) in try Delta.apply(i, to: o) } }
            }
            do { return Data(try applied.get()) } catch {
                throw PatchSyncError(.refusedData, "the manifest delta \(delta.object) does not apply", cause: error)
            }
        case let codec?:
            throw PatchSyncError(.refusedData, "the manifest delta \(delta.object) has codec \(codec), unknown here")
        }
    }
}
