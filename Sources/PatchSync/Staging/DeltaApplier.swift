import Foundation

/// Rebuilds a staged file from a live source file and a delta, one chunk at a time: each chunk of the
/// result is checked against the target manifest's signed SHA-256 before it is written, so a wrong
/// or hostile delta can cost a fetch, never a wrong byte.
///
/// Memory: one chunk of output and the source mapped; for a zstd frame (files up to 32 MiB), the source
/// read and the file decoded whole.
struct DeltaApplier {
    /// What rebuilding one file gave.
    struct Outcome: Equatable {
        /// Chunks verified and written.
        var written = 0
        /// Chunks the delta produced wrong, or never produced (a malformed delta stops early).
        var refused = 0
        /// Why the delta was refused, if it was.
        var problem: String?
    }

    let file: FileEntry
    let files: StagedFiles
    /// Chunk indices already written (a resumed sync): produced, not written again.
    let done: Set<Int>

    /// Rebuilds `file` from `sourcePath` with `instructions`.
    func rebuild(from sourcePath: String, instructions: UnsafeRawBufferPointer) throws(PatchSyncError) -> Outcome {
        var cutter = Cutter(applier: self)
        defer { cutter.buffer.deallocate() }
        let problem: String?
        do { problem = try run(from: sourcePath, instructions: instructions, into: &cutter) } catch {
            throw PatchSyncError.wrap(error).during("rebuilding \(file.path) from \(sourcePath)")
        }
        cutter.outcome.refused += file.chunks.count - cutter.index  // never produced
        cutter.outcome.problem = problem
        return cutter.outcome
    }

    /// Runs the instructions; returns why the delta was refused (nil when it ran to its end).
    private func run(
        from sourcePath: String, instructions: UnsafeRawBufferPointer,
        into cutter: inout Cutter
    ) throws -> String? {
        if Zstd.isFrame(instructions) { return try runFrame(from: sourcePath, frame: instructions, into: &cutter) }
        guard var reader = Delta.Reader(instructions) else { return "its header is malformed" }
        guard reader.targetSize == file.size else { return "it builds \(reader.targetSize) bytes, not \(file.size)" }
        // Mapped: a delta of a large file is thousands of small copies, each a slice of the mapping
        // rather than a read system call. A source gone since the plan (a ready build applied meanwhile)
        // leaves the file to its chunks.
        guard let source = try? MappedFile(path: sourcePath) else { return "its source \(sourcePath) is gone" }
        guard Int64(source.bytes.count) == reader.sourceSize else { return "its source has another size" }
        do {
            while let instruction = try reader.next() {
                switch instruction {
                case .add(let literal): try cutter.take(literal)
                case .copy(let offset, let count):
                    guard offset >= 0, count >= 0, offset + count <= Int64(source.bytes.count) else {
                        return "it copies from beyond its source"
                    }
                    try cutter.take(UnsafeRawBufferPointer(rebasing: source.bytes[Int(offset)..<Int(offset + count)]))
                }
            }
        } catch let error as DeltaError { return error.description }
        return reader.isComplete ? nil : "it ends before the target does"
    }

    /// Decodes a zstd frame with the source file as its prefix, whole, into a buffer of the file's size (at
    /// most ``DeltaPack/maxZstdDeltaBytes``); returns why it was refused (nil when it built the file).
    private func runFrame(
        from sourcePath: String, frame: UnsafeRawBufferPointer, into cutter: inout Cutter
    ) throws -> String? {
        guard file.size <= DeltaPack.maxZstdDeltaBytes else { return "it is a zstd frame for a file over 32 MiB" }
        // Read, not mapped: libzstd reads the prefix in one call, and a mapped source another program
        // truncates meanwhile would end the process (SIGBUS) instead of refusing the delta.
        guard let source = try? FileSystem.read(sourcePath, limit: Int(DeltaPack.maxZstdDeltaBytes)) else {
            return "its source \(sourcePath) is gone or over 32 MiB"
        }
        let decoded = source.withUnsafeBytes { Zstd.decompressFrame(frame, prefix: $0, limit: Int(file.size)) }
        guard let built = decoded, built.count == Int(file.size) else {
            return "it is not a zstd frame that builds the file from its source"
        }
        try built.withUnsafeBytes { try cutter.take($0) }
        return nil
    }

    /// Cuts the produced bytes at the target's chunk boundaries and writes each verified chunk.
    private struct Cutter {
        let applier: DeltaApplier
        var buffer: UnsafeMutableRawBufferPointer
        var index = 0
        var filled = 0
        var outcome = Outcome()

        init(applier: DeltaApplier) {
            self.applier = applier
            buffer = .allocate(byteCount: max(1, applier.file.chunks.map(\.length).max() ?? 0), alignment: 16)
        }

        mutating func take(_ bytes: UnsafeRawBufferPointer) throws(PatchSyncError) {
            var rest = bytes[...]
            while !rest.isEmpty, index < applier.file.chunks.count {
                let chunk = applier.file.chunks[index]
                let n = min(rest.count, chunk.length - filled)
                UnsafeMutableRawBufferPointer(rebasing: buffer[filled..<(filled + n)])
                    .copyMemory(from: UnsafeRawBufferPointer(rebasing: rest.prefix(n)))
                rest = rest.dropFirst(n)
                filled += n
                if filled == chunk.length { try finish(chunk) }
            }
        }

        private mutating func finish(_ chunk: ChunkEntry) throws(PatchSyncError) {
            let content = UnsafeRawBufferPointer(rebasing: buffer[..<chunk.length])
            if !applier.done.contains(index) {
                if SHA256Hasher.hash(content) == chunk.sha256 {
                    try applier.files.write(
                        content, chunk: chunk.sha256,
                        to: [
                            Plan.Destination(
                                path: applier.file.path, index: index,
                                offset: chunk.offset)
                        ])
                    outcome.written += 1
                } else {
                    outcome.refused += 1
                }
            }
            index += 1
            filled = 0
        }
    }
}
