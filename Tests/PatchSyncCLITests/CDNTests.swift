import Foundation
import PatchSync
import PatchSyncTestSupport
import Testing

@Suite("Objects every CDN caches, and a cache in front of the origin", .tags(.cli))
struct CDNTests {
    /// Extensions Cloudflare caches by default (its list, written out here, apart from the code).
    static let cachedByDefault: Set<String> = [
        "7z", "csv", "gif", "midi", "png", "tif", "zip", "avi", "doc", "gz", "mkv", "ppt", "tiff", "zst", "avif",
        "docx", "ico", "mp3", "pptx", "ttf", "apk", "dmg", "iso", "mp4", "ps", "webm", "bin", "ejs", "jar", "ogg",
        "rar", "webp", "bmp", "eot", "jpeg", "otf", "svg", "woff", "bz2", "eps", "jpg", "pdf", "svgz", "woff2",
        "class", "exe", "js", "pict", "swf", "xls", "css", "flac", "mid", "pls", "tar", "xlsx"
    ]

    /// Every regular file under `root`, relative, with its size.
    static func files(_ root: String) throws -> [String: Int64] {
        var found: [String: Int64] = [:]
        for path in try FileManager.default.subpathsOfDirectory(atPath: root) {
            let attributes = try FileManager.default.attributesOfItem(atPath: root + "/" + path)
            if attributes[.type] as? FileAttributeType == .typeRegular {
                found[path] = (attributes[.size] as? Int64) ?? 0
            }
        }
        return found
    }

    /// Immutable files of an origin: objects and target files (metadata versions keep TUF's names).
    static func immutable(_ origin: String) throws -> [String: Int64] {
        try files(origin).filter {
            ($0.key.hasPrefix("objects/") || $0.key.hasPrefix("targets/")) && !$0.key.contains("/.")
        }
    }

    @Test(
        "a build with a 600 MiB file publishes no object file over 256 MiB; every object and target name ends in an extension CDNs cache by default; players install it byte-exact over nginx"
    )
    func largeFileSpansSegments() throws {
        let fixture = try Fixture()
        let build = fixture.directory + "/build"
        try FileManager.default.createDirectory(atPath: build + "/data", withIntermediateDirectories: true)
        // Incompressible: stored as it is, so the object would be 600 MiB in one file.
        let big = build + "/data/big.pak"
        #expect(
            try CLI.runProgram("/bin/sh", ["-c", "head -c \(600 << 20) /dev/urandom > '\(big)'"]).status == 0)
        try Data("hello\n".utf8).write(to: URL(fileURLWithPath: build + "/readme.txt"))
        let published = try CLI.run(
            [
                "publish", build, "--origin", fixture.origin, "--build-id", "1", "--json", "--targets-key",
                fixture.keyDirectory + "/targets.key",
                "--online-key", fixture.keyDirectory + "/online.key"
            ])
        #expect(published.status == 0, "\(published.stderr)")
        let immutable = try Self.immutable(fixture.origin)
        let over = immutable.filter { $0.value > 256 << 20 }
        #expect(over.isEmpty, "no object over 256 MiB: \(over)")
        let uncached = immutable.keys.filter {
            !Self.cachedByDefault.contains(($0 as NSString).pathExtension.lowercased())
        }
        #expect(uncached.isEmpty, "every immutable name ends in a cacheable extension: \(uncached.sorted())")
        let segments = immutable.keys.filter { $0.hasPrefix("objects/") && $0.hasSuffix(".2.bin") }
        #expect(segments.count == 1, "the 600 MiB file spans three segment files: \(immutable.keys.sorted())")

        let nginx = try NginxOrigin(root: fixture.origin)
        defer { nginx.stop() }
        let root = try player(fixture, "game", remote: nginx.url)
        #expect(try contents(root + "/current") == contents(build), "the install is byte-exact")
        let objectRequests = nginx.requests().filter { $0.path.hasPrefix("/objects/") }
        #expect(objectRequests.allSatisfy { $0.path.hasSuffix(".bin") && $0.status == 206 })
        #expect(Set(objectRequests.map(\.path)).count >= 3, "each segment is asked for by its own name")
    }

    @Test(
        "a second player behind an nginx slice cache (slice 1m, proxy_cache) gets at least 95% of its bytes from the cache; repo check --cdn passes through the cache, and names a front that does not cache, one that ignores ranges and metadata kept past its max-age"
    )
    func sliceCacheAndCheck() async throws {
        let fixture = try Fixture()
        let build = try fixture.sampleBuild(1, scale: 0.02)
        try fixture.publish(build, id: "1")
        let origin = try NginxOrigin(root: fixture.origin)
        defer { origin.stop() }
        let cache = try NginxOrigin(root: fixture.origin, cacheFor: origin.url)
        defer { cache.stop() }
        for name in ["a", "b"] {
            let beforeOrigin = origin.bytesServed(), beforeCache = cache.bytesServed()
            let root = try player(fixture, name, remote: cache.url)
            #expect(try contents(root + "/current") == contents(build))
            let fromOrigin = origin.bytesServed() - beforeOrigin, received = cache.bytesServed() - beforeCache
            if name == "b" {
                #expect(received > 0)
                #expect(
                    Double(fromOrigin) <= Double(received) * 0.05,
                    "player b: \(fromOrigin) of \(received) bytes came from the origin")
            }
        }

        let through = try CLI.run(["repo", "check", "--origin", fixture.origin, "--cdn", cache.url, "--json"])
        #expect(through.status == 0, "the slice cache honours ranges and caches: \(through.stdout) \(through.stderr)")

        let direct = try CLI.run(["repo", "check", "--origin", fixture.origin, "--cdn", origin.url, "--json"])
        #expect(
            direct.status == 65 && direct.stdout.contains("\"notCached\""),
            "plain nginx caches nothing: \(direct.stdout)")

        let whole = try FaultOrigin(root: fixture.origin, fault: .ignoreRange)
        let ignoring = try CLI.run(["repo", "check", "--origin", fixture.origin, "--cdn", whole.url, "--json"])
        #expect(ignoring.stdout.contains("\"rangeIgnored\""), "\(ignoring.stdout) \(ignoring.stderr)")

        // A new timestamp the cache never asks for again (it keeps what it has for a day), an hour old.
        try fixture.publish(try fixture.sampleBuild(2, scale: 0.02), id: "2")
        let timestamp = OriginLayout(root: fixture.origin).path("metadata/timestamp.json")
        let hourAgo = Date().addingTimeInterval(-3600)
        try FileManager.default.setAttributes([.modificationDate: hourAgo], ofItemAtPath: timestamp)
        let stale = try CLI.run(["repo", "check", "--origin", fixture.origin, "--cdn", cache.url, "--json"])
        #expect(
            stale.status == 65 && stale.stdout.contains("\"metadataCachedTooLong\""),
            "the cache serves the old timestamp past its max-age: \(stale.stdout) \(stale.stderr)")
    }
}
