import Foundation

/// A whole file mapped read-only (mmap(2)): the kernel pages it in and out, so a large file costs
/// address space, not memory.
///
/// Thread-safety: immutable after init; unmapped in deinit.
final class MappedFile: @unchecked Sendable {
    let bytes: UnsafeRawBufferPointer

    /// mmap(2) of `path`, read-only and private.
    init(path: String) throws(Errno) {
        let file = try FileDescriptor(path: path, flags: O_RDONLY)
        let size = Int(try file.status().st_size)
        guard size > 0 else {
            bytes = UnsafeRawBufferPointer(start: nil, count: 0)
            return
        }
        guard let base = mmap(nil, size, PROT_READ, MAP_PRIVATE, file.fd, 0), base != MAP_FAILED else {
            throw Errno(errno, "mapping", path)
        }
        bytes = UnsafeRawBufferPointer(start: base, count: size)
    }

    deinit {
        if let base = bytes.baseAddress { munmap(UnsafeMutableRawPointer(mutating: base), bytes.count) }
    }
}
