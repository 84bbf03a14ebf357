import Foundation
import PatchSyncTestSupport
import Testing

@testable import PatchSync

/// The decoded manifest an install keeps beside the signed JSON: it loads as the same manifest, and
/// any cache that is not exactly what was written for that signed manifest (another manifest, another
/// version, a damaged or truncated body, a body that lies about its counts) is not used.
@Suite("The kept manifest's cache", .tags(.small))
struct ManifestCacheTests {
    private static func published() throws -> (Fixture, Manifest, String) {
        let fixture = try Fixture()
        let build = try fixture.sampleBuild(1, scale: 0.005)
        try FileManager.default.createSymbolicLink(
            atPath: build + "/latest.map", withDestinationPath: "maps/forest.map")
        try FileManager.default.createDirectory(atPath: build + "/saves", withIntermediateDirectories: true)
        try fixture.publish(build, id: "1")
        let data = try Data(contentsOf: URL(fileURLWithPath: try DeltaSyncTests.manifestFile(fixture, id: "1")))
        return (fixture, try Manifest.decode(data, what: "manifest"), SHA256Hasher.hash(data).hex)
    }

    @Test("a cached manifest loads as the manifest it was made from: files, chunks, links, folders, bundles")
    func roundTrip() throws {
        let (fixture, manifest, sha) = try Self.published()
        #expect(manifest.files.count > 10 && !(manifest.links ?? []).isEmpty && !(manifest.folders ?? []).isEmpty)
        let path = fixture.directory + "/1.bin"
        try ManifestCache.write(manifest, sha: sha, to: path)
        #expect(ManifestCache.read(path, sha: sha) == manifest)
        // The head alone (what a verify reads for links and folders): the manifest without its files.
        var head = manifest
        head.files = []
        #expect(ManifestCache.readHead(path, sha: sha) == head)
        let other = String(repeating: "0", count: 64)
        #expect(ManifestCache.read(path, sha: other) == nil, "a cache of another signed manifest is not used")
        #expect(ManifestCache.readHead(path, sha: other) == nil)
        // Format 7: a chunk in an earlier build's object keeps that object through the cache.
        var chunked = manifest
        let index = try #require(chunked.files.firstIndex { !$0.chunks.isEmpty })
        chunked.files[index].chunks[0].object = SHA256Digest.of(Data("an earlier object".utf8))
        try ManifestCache.write(chunked, sha: sha, to: path)
        #expect(ManifestCache.read(path, sha: sha) == chunked)
    }

    @Test(
        "a damaged, truncated or newer cache is not used, and one whose body lies about its counts is refused, never trusted or crashed on"
    )
    func damaged() throws {
        let (fixture, manifest, sha) = try Self.published()
        let path = fixture.directory + "/1.bin"
        try ManifestCache.write(manifest, sha: sha, to: path)
        let good = try Data(contentsOf: URL(fileURLWithPath: path))
        func read(_ bytes: Data) throws -> Manifest? {
            try bytes.write(to: URL(fileURLWithPath: path))
            return ManifestCache.read(path, sha: sha)
        }
        /// The head read of the same bytes: refused exactly where the whole read is.
        func head(_ bytes: Data) throws -> Manifest? {
            try bytes.write(to: URL(fileURLWithPath: path))
            return ManifestCache.readHead(path, sha: sha)
        }
        var flipped = good
        flipped[good.count / 2] ^= 0x01
        #expect(try read(flipped) == nil, "a flipped body byte fails the body's hash")
        #expect(try head(flipped) == nil, "a flipped byte beyond the head fails the head read's hash too")
        #expect(try read(good.prefix(good.count - 7)) == nil)
        #expect(try head(good.prefix(good.count - 7)) == nil)
        #expect(try read(good + Data([0])) == nil)
        #expect(try head(good + Data([0])) == nil)
        #expect(try head(good.prefix(60)) == nil, "a cache cut inside its header")
        var newer = good
        newer[4] = UInt8(ManifestCache.version + 1)
        #expect(try read(newer) == nil, "a cache of another version")
        var otherClient = good
        otherClient[8] &+= 1
        #expect(try read(otherClient) == nil, "a cache written by a client of another manifest format")
        // A body edited and hashed again (the cache is the install's own file, but its reader is bounds-checked).
        var rng = SeededRandom(seed: 33)
        let bodyStart = 4 + 4 + 4 + 32 + 8 + 32
        var refused = 0
        for _ in 0..<300 {
            var body = [UInt8](good[bodyStart...])
            body[Int(rng.next() % UInt64(body.count))] = UInt8(truncatingIfNeeded: rng.next())
            var bytes = good.prefix(bodyStart - 32)
            bytes.append(contentsOf: body.withUnsafeBytes { SHA256Hasher.hash($0) }.bytes)
            bytes.append(contentsOf: body)
            let loaded = try read(bytes)
            if loaded == nil { refused += 1 }
            if let loaded { #expect(loaded.files.count == manifest.files.count) }
        }
        #expect(refused > 0, "some edits make the body inconsistent")
        #expect(try read(good) == manifest)
    }
}
