import Foundation
import Synchronization

/// One stored object file, read back: each chunk as stored (raw or deflated) at its place, inflated and
/// checked against its SHA-256.
struct StoredObject: FileContentSource {
    /// The object's first file; its later segments' when `segments` gives them.
    let path: String
    /// The object's segment files, by segment (``ObjectNaming``); nil for one file read as it is.
    private var segments: (origin: OriginLayout, object: SHA256Digest, naming: ObjectNaming)? = nil

    /// One file holding every chunk at its `objectOffset`.
    init(path: String) { self.path = path }

    /// Object `object` of `origin`, named and cut as `naming` says.
    init(origin: OriginLayout, object: SHA256Digest, naming: ObjectNaming) {
        path = origin.path(naming.path(object))
        segments = (origin, object, naming)
    }

    func content(of file: FileEntry, into buffer: UnsafeMutableRawBufferPointer) throws(PatchSyncError) {
        do { try read(file, into: buffer) } catch { throw PatchSyncError.wrap(error) }
    }

    /// Whether every chunk of `file` reads back with its hash, one chunk in memory at a time.
    func isWhole(_ file: FileEntry) -> Bool {
        let largest = file.chunks.map(\.length).max() ?? 0
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: max(1, largest), alignment: 16)
        defer { buffer.deallocate() }
        for chunk in file.chunks {
            var one = chunk
            one.offset = 0
            let single = FileEntry(
                path: file.path, size: Int64(chunk.length), mode: file.mode, sha256: file.sha256, object: file.object,
                bundle: file.bundle, chunks: [one])
            guard (try? read(single, into: UnsafeMutableRawBufferPointer(rebasing: buffer[..<chunk.length]))) != nil
            else { return false }
        }
        return true
    }

    func read(_ file: FileEntry, into buffer: UnsafeMutableRawBufferPointer) throws(Errno) {
        let decompressor = Decompressor()
        let largest = file.chunks.map(\.objectLength).max() ?? 0
        let stored = UnsafeMutableRawBufferPointer.allocate(byteCount: max(1, largest), alignment: 16)
        defer { stored.deallocate() }
        // Opened at the first chunk that needs it: a file may have no chunk in its object's first segment.
        var object = segments == nil ? try FileDescriptor(path: path, flags: O_RDONLY) : nil
        var open: (SHA256Digest?, Int) = (nil, -1)
        for chunk in file.chunks {
            let slice = UnsafeMutableRawBufferPointer(
                rebasing: buffer[Int(chunk.offset)..<(Int(chunk.offset) + chunk.length)])
            let packed = UnsafeMutableRawBufferPointer(rebasing: stored[..<chunk.objectLength])
            var offset = chunk.objectOffset
            if let (origin, id, naming) = segments {
                // From format 7 a chunk may sit in another object than the file's.
                let wanted = (chunk.object ?? id, naming.segment(of: offset))
                if wanted != open {
                    object = try FileDescriptor(
                        path: origin.path(naming.path(wanted.0, segment: wanted.1)), flags: O_RDONLY)
                    open = wanted
                }
                offset -= naming.base(of: wanted.1)
            } else if let other = chunk.object, other != file.object {
                throw Errno(EIO, "reading a chunk stored in object \(other) from", path)
            }
            guard let object else { throw Errno(EIO, "reading a chunk of", path) }
            try object.read(into: chunk.codec == .raw ? slice : packed, at: offset)
            guard
                chunk.codec == .raw
                    || decompressor.decompress(UnsafeRawBufferPointer(packed), into: slice, as: chunk.codec)
            else {
                throw Errno(EIO, "inflating a chunk of", path)
            }
            guard SHA256Hasher.hash(UnsafeRawBufferPointer(slice)) == chunk.sha256 else {
                throw Errno(EIO, "verifying a chunk of", path)
            }
        }
    }
}

/// Reads a file of a build whole: the source of a delta.
protocol FileContentSource: Sendable {
    /// Fills `buffer` (exactly the file's size) with `file`'s content, or throws when it cannot be read
    /// as `file` describes it.
    func content(of file: FileEntry, into buffer: UnsafeMutableRawBufferPointer) throws(PatchSyncError)
}

/// Reads the files of a build folder as they are on disk, checking each one's size against its entry.
struct BuildFolderReader: FileContentSource {
    let directory: String

    func content(of file: FileEntry, into buffer: UnsafeMutableRawBufferPointer) throws(PatchSyncError) {
        let full = directory + "/" + file.path
        do {
            let input = try FileDescriptor(path: full, flags: O_RDONLY)
            let size = Int64(try input.status().st_size)
            guard size == file.size, buffer.count == Int(file.size) else {
                throw Errno(EAGAIN, "reading (it changed since it was chunked)", full)
            }
            try input.read(into: buffer, at: 0)
        } catch { throw PatchSyncError.wrap(error).during("reading \(full)") }
    }
}
