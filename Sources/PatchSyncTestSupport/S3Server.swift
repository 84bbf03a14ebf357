import Foundation

/// A real S3-compatible server on loopback (moto's server from PyPI, in `.venv-tuf`, with SigV4 request
/// authentication on) holding one bucket that anyone may read, as a bucket behind a CDN is. Started by
/// `Tests/S3/s3_server.py`; stopped when the value goes.
public final class S3Server: @unchecked Sendable {
    public let bucket: String
    public let endpoint: String
    public let accessKeyId: String
    public let secretAccessKey: String
    /// The server's request log (one line per request).
    public let logPath: String
    private let process: Process
    private let input: Pipe
    private let output: Pipe

    /// The folder of the package (Package.swift).
    public static var packageRoot: String {
        URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().path
    }

    /// libfaketime's library for threaded programs: with `clockFile`, the server reads its clock from it.
    public static let faketimeLibrary = "/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1"

    /// With `clockFile`, the server's clock is the machine's moved by what the file says (`+SECONDS`, read at
    /// every call; libfaketime's `FAKETIME_TIMESTAMP_FILE`): a test that moves its commands' clock days on
    /// moves the store's with it, so requests are signed and objects dated at one time.
    public init(bucket: String = "game", clockFile: String? = nil) throws {
        self.bucket = bucket
        logPath = NSTemporaryDirectory() + "patchsync-s3-\(UUID().uuidString).log"
        FileManager.default.createFile(atPath: logPath, contents: nil)
        process = Process()
        process.executableURL = URL(fileURLWithPath: Self.packageRoot + "/.venv-tuf/bin/python")
        process.arguments = [Self.packageRoot + "/Tests/S3/s3_server.py", bucket]
        if let clockFile {
            guard FileManager.default.fileExists(atPath: Self.faketimeLibrary) else {
                throw CocoaError(
                    .fileReadNoSuchFile,
                    userInfo: [
                        NSLocalizedDescriptionKey: "\(Self.faketimeLibrary) is missing: `make test` installs faketime"
                    ])
            }
            var environment = ProcessInfo.processInfo.environment
            environment["LD_PRELOAD"] = Self.faketimeLibrary
            environment["FAKETIME_TIMESTAMP_FILE"] = clockFile
            environment["FAKETIME_NO_CACHE"] = "1"
            environment["FAKETIME_DONT_FAKE_MONOTONIC"] = "1"  // timeouts and sleeps keep the machine's pace
            environment["NO_FAKE_STAT"] = "1"
            process.environment = environment
        }
        input = Pipe()
        output = Pipe()
        process.standardInput = input
        process.standardOutput = output
        process.standardError = FileHandle(forWritingAtPath: logPath)
        try process.run()
        var ready: [Substring]?
        while ready == nil, let line = Self.readLine(output.fileHandleForReading) {
            if line.hasPrefix("READY ") { ready = line.split(separator: " ") }
        }
        guard let ready, ready.count == 4 else {
            process.terminate()
            throw CocoaError(
                .fileReadUnknown,
                userInfo: [
                    NSLocalizedDescriptionKey: "the S3 server did not start; see \(logPath) "
                        + "(make test installs moto into .venv-tuf)"
                ])
        }
        endpoint = String(ready[1])
        accessKeyId = String(ready[2])
        secretAccessKey = String(ready[3])
    }

    deinit {
        stop()
        try? FileManager.default.removeItem(atPath: logPath)
    }

    /// The environment a `patchsync upload` needs: the user's keys, and no profile of the machine's.
    public var credentials: [String: String] {
        [
            "AWS_ACCESS_KEY_ID": accessKeyId, "AWS_SECRET_ACCESS_KEY": secretAccessKey, "AWS_REGION": "us-east-1",
            "AWS_SHARED_CREDENTIALS_FILE": "/nonexistent"
        ]
    }

    /// Forbids writing `key` of the bucket (nil: allows everything again).
    public func deny(_ key: String?) {
        input.fileHandleForWriting.write(Data(((key.map { "deny " + $0 }) ?? "allow").appending("\n").utf8))
        _ = Self.readLine(output.fileHandleForReading)
    }

    /// Deletes `key` of the bucket, as another machine would.
    public func delete(_ key: String) {
        input.fileHandleForWriting.write(Data("delete \(key)\n".utf8))
        _ = Self.readLine(output.fileHandleForReading)
    }

    /// The requests served so far: method, path (without the query) and status, in order.
    public func requests() -> [(method: String, path: String, status: Int)] {
        let text = ((try? String(contentsOfFile: logPath, encoding: .utf8)) ?? "")
            .replacingOccurrences(of: "\u{1B}\\[[0-9;]*m", with: "", options: .regularExpression)  // werkzeug's colours
        return text.split(separator: "\n").compactMap { line in
            guard let open = line.firstIndex(of: "\""),
                let close = line[line.index(after: open)...].firstIndex(of: "\"")
            else { return nil }
            let request = line[line.index(after: open)..<close].split(separator: " ")
            let after = line[line.index(after: close)...].split(separator: " ")
            guard request.count >= 2, let status = after.first.flatMap({ Int($0) }) else { return nil }
            return (String(request[0]), String(request[1].split(separator: "?").first ?? ""), status)
        }
    }

    public func stop() {
        guard process.isRunning else { return }
        try? input.fileHandleForWriting.close()
        process.terminate()
        process.waitUntilExit()
    }

    private static func readLine(_ handle: FileHandle) -> String? {
        var bytes: [UInt8] = []
        while true {
            let byte = handle.readData(ofLength: 1)
            guard let first = byte.first else { return bytes.isEmpty ? nil : String(decoding: bytes, as: UTF8.self) }
            if first == UInt8(ascii: "\n") { return String(decoding: bytes, as: UTF8.self) }
            bytes.append(first)
        }
    }
}
