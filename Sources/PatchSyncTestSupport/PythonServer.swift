import Foundation

/// A loopback test server written in Python: the script prints its port first, appends one line per
/// request to a log file, and is killed when this object is released.
final class PythonServer: @unchecked Sendable {
    let port: Int
    /// The request log the script writes (passed to it as its last argument).
    let logFile: String
    private let process: Process

    var url: String { "http://127.0.0.1:\(port)" }

    /// The log's lines.
    var logLines: [String] {
        ((try? String(contentsOfFile: logFile, encoding: .utf8)) ?? "").split(separator: "\n").map(String.init)
    }

    init(script: String, arguments: [String]) throws {
        logFile = NSTemporaryDirectory() + "python-server-\(UUID().uuidString).log"
        FileManager.default.createFile(atPath: logFile, contents: nil)
        process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/python3")
        process.arguments = ["-c", script] + arguments + [logFile]
        let out = Pipe()
        process.standardOutput = out
        try process.run()
        let line = String(decoding: out.fileHandleForReading.availableData, as: UTF8.self)
        guard let port = Int(line.trimmingCharacters(in: .whitespacesAndNewlines)) else {
            kill(process.processIdentifier, SIGKILL)
            throw NSError(
                domain: "PythonServer", code: 1, userInfo: [NSLocalizedDescriptionKey: "server did not start"])
        }
        self.port = port
    }

    deinit {
        kill(process.processIdentifier, SIGKILL)  // a child spawned by a test thread inherits SIGTERM blocked
        process.waitUntilExit()
        try? FileManager.default.removeItem(atPath: logFile)
    }
}
