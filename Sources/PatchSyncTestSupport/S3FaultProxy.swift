import Foundation

/// A flaky store: `Tests/S3/fault_proxy.py` (Python's standard library only) in front of an
/// ``S3Server``. It forwards each request as it came, its Host header too, so the SigV4 signature a
/// client makes for the proxy's address verifies at the store; a schedule fixed by `seed` answers some
/// with 503 SlowDown or 500 InternalError, cuts the connection before forwarding or half way through
/// the store's answer, or answers slowly. Its log says which request met which fault and whether it
/// reached the store. Killed when the value goes.
///
/// Thread-safety: the control pipe is written and read by one caller at a time (the tests that use it
/// are serialized); the log is a file the proxy appends to and ``requests()`` reads whole.
public final class S3FaultProxy: @unchecked Sendable {
    /// One request as the proxy's log records it, in the order the proxy decided them.
    public struct Request: Sendable, Equatable {
        public var method: String
        /// The request target as sent: percent-encoded, with its query.
        public var target: String
        /// `none`, `503`, `500`, `cut-before`, `cut-after` or `slow`.
        public var fault: String
        /// What the store answered; nil when the request never reached it.
        public var storeStatus: Int?

        /// The store applied it (2xx), whether or not the client heard so.
        public var applied: Bool { storeStatus.map { (200..<300).contains($0) } ?? false }
        /// The client got the store's 2xx answer whole.
        public var acknowledged: Bool { applied && (fault == "none" || fault == "slow") }
    }

    /// What clients are pointed at: `http://127.0.0.1:PORT`.
    public let endpoint: String
    /// The proxy's request log.
    public let logPath: String
    private let process: Process
    private let input: Pipe
    private let output: Pipe

    /// The faults the proxy knows.
    public static let allFaults = ["503", "500", "cut", "slow"]

    /// Starts a proxy in front of `upstream` (an ``S3Server/endpoint``) that gives a fault to a share
    /// `faultRate` of requests, drawn from `faults` by a schedule that `seed` fixes.
    public init(upstream: String, seed: Int, faultRate: Double, faults: [String] = S3FaultProxy.allFaults) throws {
        logPath = NSTemporaryDirectory() + "patchsync-fault-proxy-\(UUID().uuidString).log"
        FileManager.default.createFile(atPath: logPath, contents: nil)
        FileManager.default.createFile(atPath: logPath + ".stderr", contents: nil)
        process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/python3")
        process.arguments = [
            S3Server.packageRoot + "/Tests/S3/fault_proxy.py", "--upstream", upstream, "--port", "0",
            "--seed", String(seed), "--fault-rate", String(faultRate), "--faults", faults.joined(separator: ","),
            "--log", logPath
        ]
        input = Pipe()
        output = Pipe()
        process.standardInput = input
        process.standardOutput = output
        process.standardError = FileHandle(forWritingAtPath: logPath + ".stderr")
        try process.run()
        guard let line = Self.readLine(output.fileHandleForReading), let port = Int(line) else {
            kill(process.processIdentifier, SIGKILL)
            process.waitUntilExit()
            throw CocoaError(
                .fileReadUnknown,
                userInfo: [NSLocalizedDescriptionKey: "the fault proxy did not start; see \(logPath).stderr"])
        }
        endpoint = "http://127.0.0.1:\(port)"
    }

    deinit {
        kill(process.processIdentifier, SIGKILL)  // a child spawned by a test thread inherits SIGTERM blocked
        process.waitUntilExit()
        try? FileManager.default.removeItem(atPath: logPath)
        try? FileManager.default.removeItem(atPath: logPath + ".stderr")
    }

    /// Gives a fault to a share `rate` of the requests from now on (0: forwards everything as it is).
    public func setFaultRate(_ rate: Double) {
        input.fileHandleForWriting.write(Data("rate \(rate)\n".utf8))
        _ = Self.readLine(output.fileHandleForReading)
    }

    /// The requests so far, in the order the proxy decided them.
    public func requests() -> [Request] {
        let text = (try? String(contentsOfFile: logPath, encoding: .utf8)) ?? ""
        return text.split(separator: "\n").compactMap { line in
            let words = line.split(separator: " ")
            guard words.count == 4 else { return nil }
            return Request(
                method: String(words[0]), target: String(words[1]), fault: String(words[2]), storeStatus: Int(words[3]))
        }
    }

    /// A line the proxy wrote on its standard output, without its newline; nil once it closed it.
    private static func readLine(_ handle: FileHandle) -> String? {
        var bytes: [UInt8] = []
        while let byte = handle.readData(ofLength: 1).first {
            if byte == UInt8(ascii: "\n") { return String(decoding: bytes, as: UTF8.self) }
            bytes.append(byte)
        }
        return bytes.isEmpty ? nil : String(decoding: bytes, as: UTF8.self)
    }
}
