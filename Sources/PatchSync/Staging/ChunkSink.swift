import Foundation

/// Receives one range of an object, cuts it into its chunks, and for each: inflates,
/// checks its SHA-256, and only then writes it to its places in the staged build.
///
/// Thread-safety: used on the transfer thread only, then read by the requester after completion.
final class ChunkSink: ResponseSink, @unchecked Sendable {
    private let needs: [Plan.Need]
    private let files: StagedFiles
    private let url: String
    private var position: Int64
    private var index = 0
    private var buffer: [UInt8] = []
    private var inflated: [UInt8] = []

    /// The range to ask for: from the first chunk's start to the last chunk's end.
    var range: ClosedRange<Int64> {
        let last = needs[needs.count - 1].chunk
        return needs[0].chunk.objectOffset...(last.objectOffset + Int64(last.objectLength) - 1)
    }

    /// The needs this sink has written and verified so far.
    var completed: Int { index }

    init(needs: [Plan.Need], files: StagedFiles, url: String) {
        self.needs = needs
        self.files = files
        self.url = url
        self.position = needs[0].chunk.objectOffset
    }

    func receive(_ bytes: UnsafeRawBufferPointer) -> PatchSyncError? {
        var rest = bytes[...]
        while !rest.isEmpty {
            guard index < needs.count else {
                return PatchSyncError(.refusedData, "\(url) sent more bytes than the range asked")
            }
            let chunk = needs[index].chunk
            if position < chunk.objectOffset {  // a coalesced gap: skip it
                let skip = Int(min(Int64(rest.count), chunk.objectOffset - position))
                rest = rest.dropFirst(skip)
                position += Int64(skip)
                continue
            }
            let take = min(rest.count, chunk.objectLength - buffer.count)
            buffer.append(contentsOf: rest.prefix(take))
            rest = rest.dropFirst(take)
            position += Int64(take)
            if buffer.count == chunk.objectLength {
                if let error = finishChunk(needs[index]) { return error }
                buffer.removeAll(keepingCapacity: true)
                index += 1
            }
        }
        return nil
    }

    private func finishChunk(_ need: Plan.Need) -> PatchSyncError? {
        let chunk = need.chunk
        let ok: Bool = buffer.withUnsafeBytes { stored in
            switch chunk.codec {
            case .raw:
                return chunk.length == stored.count && SHA256Hasher.hash(stored) == chunk.sha256
            case .zlib:
                if inflated.count < chunk.length { inflated = [UInt8](repeating: 0, count: chunk.length) }
                return inflated.withUnsafeMutableBytes { out in
                    let target = UnsafeMutableRawBufferPointer(rebasing: out[0..<chunk.length])
                    return Zlib.inflate(stored, into: target)
                        && SHA256Hasher.hash(UnsafeRawBufferPointer(target)) == chunk.sha256
                }
            }
        }
        guard ok else {
            return PatchSyncError(.refusedData, "object \(need.object) from \(url): the chunk at object offset "
                                  + "\(chunk.objectOffset) does not match its signed SHA-256 \(chunk.sha256)",
                                  remedy: "the mirror serves a damaged or tampered object; report it to the publisher")
        }
        let bytes = chunk.codec == .raw ? buffer : Array(inflated[0..<chunk.length])
        do {
            try bytes.withUnsafeBytes { raw in
                do throws(PatchSyncError) { try files.write(raw, to: need.destinations) } catch { throw error }
            }
        } catch { return PatchSyncError.wrap(error) }
        return nil
    }
}
