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
    /// The stored bytes of a chunk that arrived in pieces.
    private let pending: UnsafeMutableRawBufferPointer
    private var filled = 0
    /// Where a deflated chunk is inflated.
    private let inflated: UnsafeMutableRawBufferPointer

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
        pending = .allocate(byteCount: needs.map(\.chunk.objectLength).max() ?? 0, alignment: 16)
        inflated = .allocate(byteCount: needs.map(\.chunk.length).max() ?? 0, alignment: 16)
    }

    deinit {
        pending.deallocate()
        inflated.deallocate()
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
            let take = min(rest.count, chunk.objectLength - filled)
            let piece = UnsafeRawBufferPointer(rebasing: rest.prefix(take))
            rest = rest.dropFirst(take)
            position += Int64(take)
            if filled == 0 && take == chunk.objectLength {  // the whole chunk in one piece: no copy
                if let error = finishChunk(needs[index], stored: piece) { return error }
            } else {
                UnsafeMutableRawBufferPointer(rebasing: pending[filled..<(filled + take)]).copyMemory(from: piece)
                filled += take
                guard filled == chunk.objectLength else { continue }
                filled = 0
                let stored = UnsafeRawBufferPointer(rebasing: pending[0..<chunk.objectLength])
                if let error = finishChunk(needs[index], stored: stored) { return error }
            }
            index += 1
        }
        return nil
    }

    /// Inflates and checks one chunk, then writes it to every place it goes.
    private func finishChunk(_ need: Plan.Need, stored: UnsafeRawBufferPointer) -> PatchSyncError? {
        let chunk = need.chunk
        var content = stored
        if chunk.codec == .zlib {
            let target = UnsafeMutableRawBufferPointer(rebasing: inflated[0..<chunk.length])
            content = Zlib.inflate(stored, into: target) ? UnsafeRawBufferPointer(target) : UnsafeRawBufferPointer(start: nil, count: 0)
        }
        guard content.count == chunk.length, SHA256Hasher.hash(content) == chunk.sha256 else {
            return PatchSyncError(.refusedData, "object \(need.object) from \(url): the chunk at object offset "
                                  + "\(chunk.objectOffset) does not match its signed SHA-256 \(chunk.sha256)",
                                  remedy: "the mirror serves a damaged or tampered object; report it to the publisher")
        }
        do { try files.write(content, to: need.destinations) } catch { return error }
        return nil
    }
}
