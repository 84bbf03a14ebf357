import Foundation
import PatchSync
import PatchSyncTestSupport
import Testing

/// Issue 7, part 2: every fault a CDN or broken mirror can serve, each from the fault-injecting
/// origin over a real published build. A fault on the first response of each object is survived
/// (retry on the same mirror); a mirror that always faults ends the sync, once the failure streak is
/// spent, with the exit code and a message naming the mirror and the fault, staging nothing
/// unverified; nothing hangs.
@Suite("Transfer faults", .tags(.cli), .serialized)  // each case blocks a thread of the shared pool for seconds
struct TransferFaultTests {
    /// The outcome when the only mirror always answers with the fault: exit status and words of the message.
    static let always: [FaultOrigin.Fault: (Int32, String)] = [
        .unavailable: (69, "HTTP status 503"),
        .flipped: (65, "does not match its signed SHA-256"),
        .missing: (69, "not found"),
        .ignoreRange: (0, ""),  // the range is cut out of the whole file
        .otherRange: (65, "wrong range"),
        .noContentRange: (65, "Content-Range is missing"),
        .malformedContentRange: (65, "Content-Range is \"bytes nonsense\""),
        .closeMidBody: (69, "closed with"),
        .endlessBody: (65, "exceeds the"),
        .oversizedBody: (65, "Content-Length is"),
        .stall: (69, "too slow"),
        .trickle: (69, "too slow"),
        .redirectLoop: (69, "redirects")
    ]

    /// Quick cut-offs so the slow faults take seconds: below 1024 B/s for 1 s. The failure streak stays
    /// at its default (8): above the 6 requests in flight, each of which may meet one fault.
    static func configure(_ config: inout InstallConfig) {
        config.lowSpeedSeconds = 1
    }

    /// Points the install at other mirrors (as an operator editing config.json would).
    static func setRemotes(_ install: Install, _ remotes: [String]) throws {
        var config = try install.config()
        config.remotes = remotes
        try JSONEncoder().encode(config).write(to: URL(fileURLWithPath: install.configPath))
    }

    // A stall is cut off, a backoff waited out: never a hang (the time limit is each fault's).
    @Test(
        "a fault on the first response of each object is retried and the sync completes with a verified tree",
        .timeLimit(.minutes(2)),
        arguments: FaultOrigin.Fault.allCases.filter { $0 != .missing })  // a 404 is an answer: next mirror
    func faultOnce(_ fault: FaultOrigin.Fault) throws {
        let fixture = try Fixture.published(packs: false)
        // Objects whose names start with 0 (a sixteenth): each costs a backoff, a stall a cut-off.
        let origin = try FaultOrigin(root: fixture.origin, fault: fault, count: 1, prefix: "/objects/0")
        let install = try fixture.makeInstall(remotes: [origin.url], configure: Self.configure)
        let result = try CLI.run(["sync", "--install", install.root])
        #expect(result.status == 0, "\(fault): \(result.stderr)")
        let faulted = origin.requests.map { $0.split(separator: " ")[1] }.filter { $0.hasPrefix("/objects/0") }
        if fault == .ignoreRange {
            #expect(origin.requests.contains { $0.hasPrefix("200 /objects/0") }, "whole files were served for ranges")
        } else {
            #expect(faulted.count > Set(faulted).count, "the faulty responses were retried")
        }
        try Self.expectVerified(install, fixture: fixture)
    }

    @Test(
        "a mirror that always faults: exit code and message name mirror and fault; nothing unverified is staged (a good mirror then completes the same staging and it verifies)",
        arguments: FaultOrigin.Fault.allCases)
    func faultAlways(_ fault: FaultOrigin.Fault) throws {
        let (status, words) = try #require(Self.always[fault])
        let fixture = try Fixture.published(packs: false)
        let origin = try FaultOrigin(root: fixture.origin, fault: fault)
        let install = try fixture.makeInstall(remotes: [origin.url], configure: Self.configure)
        let result = try CLI.run(["sync", "--install", install.root])
        #expect(result.status == status, "\(fault): \(result.stderr)")
        if status != 0 {
            #expect(result.stderr.contains(origin.url) && result.stderr.contains(words), "\(fault): \(result.stderr)")
            #expect(!FileManager.default.fileExists(atPath: install.root + "/current"))
            let good = try NginxOrigin(root: fixture.origin)
            try Self.setRemotes(install, [good.url])
            let resumed = try CLI.run(["sync", "--install", install.root])
            #expect(resumed.status == 0, "\(fault): \(resumed.stderr)")
        }
        try Self.expectVerified(install, fixture: fixture)
    }

    @Test("an endless body is cut off at the bytes asked: the origin sent little of its 1 GiB")
    func endlessBodyBounded() throws {
        let fixture = try Fixture.published(packs: false)
        let origin = try FaultOrigin(root: fixture.origin, fault: .endlessBody, prefix: "/metadata/timestamp.json")
        let install = try fixture.makeInstall(remotes: [origin.url], configure: Self.configure)
        let result = try CLI.run(["sync", "--install", install.root])
        #expect(result.status == 65 && result.stderr.contains("exceeds the 16384 bytes allowed"), "\(result.stderr)")
        // The server logs what it sent once the client hung up.
        var sent: Int64 = 0
        Poll.until(timeout: .seconds(30)) { origin.requests.count >= 2 }
        sent = origin.bytesSent
        #expect(origin.requests.count >= 2 && sent < 64 << 20, "\(sent) bytes sent for 16 KiB asked")
    }

    @Test("a mirror that ignores Range: each request reads no further than its range's end")
    func ignoredRangeBounded() throws {
        let fixture = try Fixture.published(packs: false)
        let origin = try FaultOrigin(root: fixture.origin, fault: .ignoreRange)
        let install = try fixture.makeInstall(remotes: [origin.url])
        let result = try CLI.run(["sync", "--install", install.root, "--json"])
        #expect(result.status == 0, "\(result.stderr)")
        let report = try lastJSON(result.stdout)
        let received = try #require(report["bytesReceived"] as? Int)
        let objects = try FileManager.default.contentsOfDirectory(atPath: fixture.origin + "/objects")
        var objectBytes = 0
        for name in objects {
            let attributes = try FileManager.default.attributesOfItem(atPath: fixture.origin + "/objects/" + name)
            objectBytes += (attributes[.size] as? Int) ?? 0
        }
        let requests = try #require(report["requests"] as? Int)
        #expect(
            received <= objectBytes * max(1, requests / max(1, objects.count)) + (1 << 20),
            "\(received) bytes received for \(objectBytes) bytes of objects in \(requests) requests")
    }

    // Without the deadline the trickle would outlast the time limit: exit 69 naming the timeout is the cut.
    @Test(
        "a request deadline cuts off a body that keeps just above the low-speed limit (exit 69, named)",
        .timeLimit(.minutes(1)))
    func requestDeadline() throws {
        let fixture = try Fixture.published(scale: 0.01, packs: false)
        let origin = try FaultOrigin(root: fixture.origin, fault: .trickle)
        let install = try fixture.makeInstall(remotes: [origin.url]) {
            $0.lowSpeedBytesPerSecond = 50  // the trickle (100 B/s) stays above it
            $0.requestTimeoutSeconds = 2
            $0.failureStreak = 1  // the first cut-off ends the sync (small objects would otherwise keep arriving)
        }
        let result = try CLI.run(["sync", "--install", install.root])
        #expect(result.status == 69 && result.stderr.contains("timed out"), "\(result.stderr)")
    }

    /// Applies the staged build and checks every file against the published build.
    static func expectVerified(_ install: Install, fixture: Fixture) throws {
        let applied = try CLI.run(["apply", "--install", install.root])
        #expect(applied.status == 0, "\(applied.stderr)")
        let build = try fixture.sampleBuild(1, scale: 0.002)
        #expect(
            try treeFacts(install.root + "/current").mapValues(\.sha256) == (try treeFacts(build)).mapValues(\.sha256))
        let verify = try CLI.run(["verify", "--install", install.root, "--full"])
        #expect(verify.status == 0, "\(verify.stdout)\(verify.stderr)")
    }
}
