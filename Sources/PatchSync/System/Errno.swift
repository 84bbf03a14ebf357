import Foundation

/// A failed system call: which call, on which path, and the errno it returned.
public struct Errno: Error, CustomStringConvertible, Sendable {
    public var code: Int32
    public var operation: String
    public var path: String

    public init(_ code: Int32 = errno, _ operation: String, _ path: String) {
        self.code = code
        self.operation = operation
        self.path = path
    }

    public var description: String {
        "\(operation) \(path): \(String(cString: strerror(code)))"
    }

    /// What a person can do about it, where errno says something useful.
    var remedy: String {
        switch code {
        case ENOSPC, EDQUOT: return "free disk space, then run the command again; progress is kept"
        case EACCES, EPERM, EROFS: return "check the permissions of \(path)"
        case ENOENT: return "check that \(path) exists"
        case EIO:
            return
                "the disk reported an I/O error: check it (dmesg, SMART), then run again; the live build is untouched"
        default: return "run the command again; the live build is untouched and progress is kept"
        }
    }
}
