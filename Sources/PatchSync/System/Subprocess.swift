import Foundation

/// Runs a short helper command (nmcli) and reads what it prints.
enum Subprocess {
    /// The standard output of `command` (a path, or a name searched in PATH), or nil when it
    /// is missing, fails, or runs longer than `timeout` seconds (then it is killed).
    static func output(_ command: String, _ arguments: [String], timeout: TimeInterval) -> String? {
        guard let path = locate(command) else { return nil }
        let process = Process()
        process.executableURL = URL(fileURLWithPath: path)
        process.arguments = arguments
        let pipe = Pipe()
        process.standardOutput = pipe
        process.standardError = FileHandle.nullDevice
        process.standardInput = FileHandle.nullDevice
        guard (try? process.run()) != nil else { return nil }
        let pid = process.processIdentifier
        let killer = DispatchWorkItem { kill(pid, SIGKILL) }
        DispatchQueue.global().asyncAfter(deadline: .now() + timeout, execute: killer)
        let data = pipe.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        killer.cancel()
        guard process.terminationReason == .exit, process.terminationStatus == 0 else { return nil }
        return String(data: data, encoding: .utf8)
    }

    /// `command` itself when it holds a slash, else the first executable of that name in PATH.
    static func locate(_ command: String) -> String? {
        if command.contains("/") { return access(command, X_OK) == 0 ? command : nil }
        let path = ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin:/bin"
        return path.split(separator: ":").map { "\($0)/\(command)" }.first { access($0, X_OK) == 0 }
    }
}
