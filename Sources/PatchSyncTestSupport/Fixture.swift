import Foundation
import PatchSync
import Synchronization

/// A scratch world for one test: a temporary folder with keys, an origin
/// repository, generated builds and installs; removed when released.
public final class Fixture: @unchecked Sendable {
    public let directory: String
    public let rootKey: SigningKey
    public let targetsKey: SigningKey
    public let onlineKey: SigningKey
    /// The keys a publish signs with.
    public var signers: Repository.Signers { Repository.Signers(targets: [targetsKey], online: onlineKey) }
    public var origin: String { directory + "/origin" }
    public var rootMetadata: String { OriginLayout(root: origin).rootMetadataFile }

    public init(now: Date = Date()) throws {
        directory = NSTemporaryDirectory() + "patchsync-test-\(UUID().uuidString)"
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        _ = try Keys.generate(into: directory + "/keys")
        rootKey = try SigningKey.load(path: directory + "/keys/root.key")
        targetsKey = try SigningKey.load(path: directory + "/keys/targets.key")
        onlineKey = try SigningKey.load(path: directory + "/keys/online.key")
        _ = try Repository.create(
            origin: directory + "/origin", rootKey: rootKey, targetsKey: targetsKey,
            onlineKey: onlineKey, now: now)
    }

    /// A fixture whose origin already holds build "1" of the sample game at `scale`; without `packs`,
    /// every file is its own object (hundreds of requests for a transfer test to fault).
    public static func published(scale: Double = 0.002, packs: Bool = true) throws -> Fixture {
        let fixture = try Fixture()
        try fixture.publish(
            try fixture.sampleBuild(1, scale: scale), id: "1", smallFileBytes: packs ? PackWriter.defaultSmallFile : 0)
        return fixture
    }

    deinit {
        Self.keepManifests(from: directory)
        _ = try? Process.run(URL(fileURLWithPath: "/bin/chmod"), arguments: ["-R", "u+w", directory]).waitUntilExit()
        try? FileManager.default.removeItem(atPath: directory)
    }

    public var keyDirectory: String { directory + "/keys" }

    /// With `PATCHSYNC_KEEP_MANIFESTS` naming a folder, every binary manifest a fixture's origins hold is
    /// copied there (by its hash-prefixed name) before the fixture is removed: after a test run,
    /// `Scripts/check-manifests.sh` has the reference reader read every build the tests published.
    private static func keepManifests(from directory: String) {
        guard let keep = ProcessInfo.processInfo.environment["PATCHSYNC_KEEP_MANIFESTS"], !keep.isEmpty,
            let walk = FileManager.default.enumerator(atPath: directory)
        else { return }
        try? FileManager.default.createDirectory(atPath: keep, withIntermediateDirectories: true)
        while let path = walk.nextObject() as? String {
            guard path.contains("targets/manifests/"), let name = path.split(separator: "/").last,
                let handle = FileHandle(forReadingAtPath: directory + "/" + path)
            else { continue }
            let head = (try? handle.read(upToCount: 4)) ?? nil
            try? handle.close()
            guard head == Data([0x28, 0xB5, 0x2F, 0xFD]), !FileManager.default.fileExists(atPath: keep + "/" + name)
            else { continue }
            try? FileManager.default.copyItem(atPath: directory + "/" + path, toPath: keep + "/" + name)
        }
    }

    /// Writes build `number` of the sample game at `scale` and returns its folder.
    public func sampleBuild(_ number: Int, scale: Double, seed: UInt64 = 7) throws -> String {
        let path = directory + "/build-\(number)"
        if !FileManager.default.fileExists(atPath: path) {
            try SampleGame(seed: seed, scale: scale).write(build: number, into: path)
        }
        return path
    }

    /// Publishes a build folder into the origin.
    @discardableResult
    public func publish(
        _ build: String, id: String, channel: String = "live",
        chunking: ChunkingParameters = .standard, deltaSources: Int = 2,
        smallFileBytes: Int = PackWriter.defaultSmallFile, keepBuilds: Int = Publisher.Options.defaultKeepBuilds,
        bundles: [PatchSync.Bundle] = [.base], now: Date = Date(), codec: ObjectCodec = .default,
        fragmentation: Fragmentation = .standard
    ) throws -> Publisher.Report {
        var options = Publisher.Options(
            buildDirectory: build, origin: origin, buildId: try BuildID(id),
            bundles: try BundleRules(bundles: bundles))
        options.channel = try Channel(channel)
        options.chunking = chunking
        options.deltaSources = deltaSources
        options.smallFileBytes = smallFileBytes
        options.codec = codec
        options.fragmentation = fragmentation
        options.keepBuilds = keepBuilds
        options.now = now
        options.replaceMost = true  // a test's builds are what it means to publish (the guard has tests of its own)
        return try Publisher(options: options, signers: signers).run()
    }

    /// Creates an install following `remotes`.
    public func makeInstall(
        _ name: String = "install", remotes: [String], configure: (inout InstallConfig) -> Void = { _ in }
    ) throws -> Install {
        var config = InstallConfig(remotes: remotes, channel: "live")
        configure(&config)
        return try Install.create(at: directory + "/" + name, config: config, trustedRoot: rootMetadata)
    }

    /// The origin as a file:// remote.
    public var fileRemote: String { "file://" + origin }
}

/// Runs the built `patchsync` binary and captures what it printed.
public enum CLI {
    public struct Result: Sendable {
        public var status: Int32
        public var stdout: String
        public var stderr: String

        public init(status: Int32, stdout: String, stderr: String) {
            self.status = status
            self.stdout = stdout
            self.stderr = stderr
        }
    }

    /// The folder of the built products (next to the test bundle).
    public static var productsDirectory: String {
        let exe =
            (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")) ?? CommandLine.arguments[0]
        var dir = (exe as NSString).deletingLastPathComponent
        while !dir.isEmpty, dir != "/", !FileManager.default.isExecutableFile(atPath: dir + "/patchsync") {
            dir = (dir as NSString).deletingLastPathComponent
        }
        return dir
    }

    public static var executable: String { productsDirectory + "/patchsync" }

    /// Runs any program to completion; stdout and stderr are captured together in `stdout`.
    public static func runProgram(_ path: String, _ arguments: [String]) throws -> Result {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: path)
        process.arguments = arguments
        let out = Pipe()
        process.standardOutput = out
        process.standardError = out
        try process.run()
        let text = String(decoding: out.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        process.waitUntilExit()
        return Result(status: process.terminationStatus, stdout: text, stderr: "")
    }

    /// Runs `patchsync ARGS…` to completion, with `environment` added to this process's. stderr is read
    /// on another thread while stdout is read here: a child that fills one pipe while the other is read
    /// to its end would otherwise wait forever.
    public static func run(_ arguments: [String], environment: [String: String] = [:]) throws -> Result {
        let process = try start(arguments, environment: environment)
        let errHandle = process.err.fileHandleForReading
        let errData = Mutex(Data())
        let readErr = DispatchGroup()
        DispatchQueue.global().async(group: readErr) {
            let data = errHandle.readDataToEndOfFile()
            errData.withLock { $0 = data }
        }
        let out = process.out.fileHandleForReading.readDataToEndOfFile()
        readErr.wait()
        let err = errData.withLock { $0 }
        process.process.waitUntilExit()
        return Result(
            status: process.process.terminationStatus, stdout: String(decoding: out, as: UTF8.self),
            stderr: String(decoding: err, as: UTF8.self))
    }

    /// Starts `patchsync ARGS…` without waiting, for kill tests.
    public static func start(_ arguments: [String], environment: [String: String] = [:]) throws
        -> (process: Process, out: Pipe, err: Pipe)
    {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: executable)
        process.arguments = arguments
        if !environment.isEmpty {
            process.environment = ProcessInfo.processInfo.environment.merging(environment) { $1 }
        }
        let out = Pipe(), err = Pipe()
        process.standardOutput = out
        process.standardError = err
        try process.run()
        return (process, out, err)
    }
}

/// A file's content hash and permission bits.
public struct FileFacts: Hashable, Sendable {
    public var sha256: String
    public var mode: Int

    public init(sha256: String, mode: Int) {
        self.sha256 = sha256
        self.mode = mode
    }
}

/// The content hash and mode of every file under a folder (a `current` link is followed).
public func treeFacts(_ root: String) throws -> [String: FileFacts] {
    let resolved = URL(fileURLWithPath: root).resolvingSymlinksInPath().path
    var result: [String: FileFacts] = [:]
    guard let walker = FileManager.default.enumerator(atPath: resolved) else { return result }
    while let path = walker.nextObject() as? String {
        let full = resolved + "/" + path
        var isDir: ObjCBool = false
        guard FileManager.default.fileExists(atPath: full, isDirectory: &isDir), !isDir.boolValue else { continue }
        let attrs = try FileManager.default.attributesOfItem(atPath: full)
        let mode = (attrs[.posixPermissions] as? NSNumber)?.intValue ?? 0
        result[path] = FileFacts(sha256: try SHA256Digest.of(file: full).hex, mode: mode)
    }
    return result
}

/// Overwrites `count` bytes of the read-only file at `path` from `offset`, in place (same inode, same
/// size), as a user or a tool damaging an installed file would; its mode is put back.
public func overwriteInPlace(_ path: String, at offset: UInt64 = 0, count: Int = 8) throws {
    let mode = try FileManager.default.attributesOfItem(atPath: path)[.posixPermissions] as? NSNumber
    try FileManager.default.setAttributes([.posixPermissions: 0o644], ofItemAtPath: path)
    let handle = try FileHandle(forWritingTo: URL(fileURLWithPath: path))
    try handle.seek(toOffset: offset)
    handle.write(Data(repeating: 0xEE, count: count))
    try handle.close()
    try FileManager.default.setAttributes([.posixPermissions: mode ?? 0o444], ofItemAtPath: path)
}
