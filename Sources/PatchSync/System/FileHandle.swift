import Foundation

/// An open file descriptor, closed when the value is released.
///
/// Not shared between threads without outside synchronisation: pread and
/// pwrite at explicit offsets are safe concurrently, close happens in deinit.
final class FileDescriptor: @unchecked Sendable {
    let fd: Int32
    let path: String

    /// open(2) of `path`.
    init(path: String, flags: Int32, mode: mode_t = 0o644) throws(Errno) {
        let fd = open(path, flags | O_CLOEXEC, mode)
        guard fd >= 0 else { throw Errno(errno, "opening", path) }
        self.fd = fd
        self.path = path
    }

    /// Opens a file of the install's own (a download, a preload range) without following a link at its
    /// name: a symbolic link, a hard link to another file, a FIFO or anything else but a plain file of its
    /// own planted there is removed, never written through or waited on, and the file is created anew.
    static func ownFile(_ path: String, flags: Int32, mode: mode_t = 0o600) throws(Errno) -> FileDescriptor {
        var st = stat()
        if lstat(path, &st) == 0, (st.st_mode & S_IFMT) != S_IFREG || st.st_nlink > 1 {
            guard unlink(path) == 0 || errno == ENOENT else { throw Errno(errno, "removing what stands at", path) }
        }
        var file: FileDescriptor
        do { file = try FileDescriptor(path: path, flags: flags | O_NOFOLLOW | O_NONBLOCK, mode: mode) } catch
            where error.code == ELOOP
        {
            guard unlink(path) == 0 || errno == ENOENT else { throw Errno(errno, "removing the link at", path) }
            file = try FileDescriptor(path: path, flags: flags | O_NOFOLLOW | O_NONBLOCK | O_CREAT | O_EXCL, mode: mode)
        }
        guard fstat(file.fd, &st) == 0 else { throw Errno(errno, "checking", path) }
        guard (st.st_mode & S_IFMT) == S_IFREG, st.st_nlink == 1 else {
            throw Errno(EEXIST, "opening (another file was put there meanwhile)", path)
        }
        return file
    }

    /// Owns `fd`, a descriptor opened elsewhere (an *at call).
    init(owning fd: Int32, path: String) {
        self.fd = fd
        self.path = path
    }

    deinit { close(fd) }

    /// read(2) into `buffer`; returns the count, 0 at end of file.
    func read(into buffer: UnsafeMutableRawBufferPointer) throws(Errno) -> Int {
        while true {
            let n = Foundation.read(fd, buffer.baseAddress, buffer.count)
            if n >= 0 { return n }
            if errno != EINTR { throw Errno(errno, "reading", path) }
        }
    }

    /// Reads until `buffer` is full or the file ends; returns the count.
    func readFully(into buffer: UnsafeMutableRawBufferPointer) throws(Errno) -> Int {
        var total = 0
        while total < buffer.count {
            let n = try read(into: UnsafeMutableRawBufferPointer(rebasing: buffer[total...]))
            if n == 0 { break }
            total += n
        }
        return total
    }

    /// pread(2) until `buffer` is full; fails on a short file.
    func read(into buffer: UnsafeMutableRawBufferPointer, at offset: Int64) throws(Errno) {
        guard let base = buffer.baseAddress else { return }
        var done = 0
        while done < buffer.count {
            let n = pread(fd, base + done, buffer.count - done, off_t(offset) + off_t(done))
            if n < 0 && errno == EINTR { continue }
            if n < 0 { throw Errno(errno, "reading", path) }
            if n == 0 { throw Errno(EIO, "reading (file shorter than expected)", path) }
            done += n
        }
    }

    /// pwrite(2) of all of `buffer` at `offset`.
    func write(_ buffer: UnsafeRawBufferPointer, at offset: Int64) throws(Errno) {
        guard let base = buffer.baseAddress else { return }
        var done = 0
        while done < buffer.count {
            let n = pwrite(fd, base + done, buffer.count - done, off_t(offset) + off_t(done))
            if n < 0 && errno == EINTR { continue }
            if n < 0 { throw Errno(errno, "writing", path) }
            done += n
        }
    }

    /// write(2) of all of `buffer` at the current position.
    func write(_ buffer: UnsafeRawBufferPointer) throws(Errno) {
        guard let base = buffer.baseAddress else { return }
        var done = 0
        while done < buffer.count {
            let n = Foundation.write(fd, base + done, buffer.count - done)
            if n < 0 && errno == EINTR { continue }
            if n < 0 { throw Errno(errno, "writing", path) }
            done += n
        }
    }

    /// write(2) of all of `bytes` at the current position.
    func write(_ bytes: [UInt8]) throws(Errno) {
        let failure: Errno? = bytes.withUnsafeBytes { raw in
            do throws(Errno) {
                try write(raw)
                return nil
            } catch { return error }
        }
        if let failure { throw failure }
    }

    /// write(2) of all of `data` at the current position.
    func write(_ data: Data) throws(Errno) {
        let failure: Errno? = data.withUnsafeBytes { raw in
            do throws(Errno) {
                try write(raw)
                return nil
            } catch { return error }
        }
        if let failure { throw failure }
    }

    /// read(2) into `bytes`; returns the count, 0 at end of file.
    func read(into bytes: inout [UInt8]) throws(Errno) -> Int {
        let result: Result<Int, Errno> = bytes.withUnsafeMutableBytes { raw in
            do throws(Errno) { return .success(try read(into: raw)) } catch { return .failure(error) }
        }
        return try result.get()
    }

    /// fsync(2).
    func sync() throws(Errno) {
        if fsync(fd) != 0 { throw Errno(errno, "syncing", path) }
    }

    /// ftruncate(2) to `size`.
    func truncate(to size: Int64) throws(Errno) {
        if ftruncate(fd, off_t(size)) != 0 { throw Errno(errno, "resizing", path) }
    }

    /// fstat(2).
    func status() throws(Errno) -> stat {
        var st = stat()
        if fstat(fd, &st) != 0 { throw Errno(errno, "reading status of", path) }
        return st
    }
}
