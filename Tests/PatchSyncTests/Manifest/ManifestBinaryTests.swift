import Foundation
import PatchSyncTestSupport
import Testing

@testable import PatchSync

/// The binary manifest (format 8) as a build's target holds it: it reads back as the manifest it was
/// made from, byte for byte, the reference reader written apart from the library (`manifests/
/// manifest_reader.py`) sees the same manifest, and a truncated or lying one is refused by both.
@Suite("The binary manifest", .tags(.medium))
struct ManifestBinaryTests {
    /// Two builds with a link, an empty folder, a non-ASCII path, two bundles, a delta pack and chunks of a
    /// changed pak left in build 1's objects; their targets' bytes.
    private static func published() throws -> (Fixture, [Data]) {
        let fixture = try Fixture()
        var generator = SeededRandom(seed: 42)
        var pak = (0..<(4 << 20)).map { _ in UInt8(truncatingIfNeeded: generator.next()) }
        let bundles = [
            PatchSync.Bundle(name: "levels", required: false, priority: 1, paths: ["levels/**"]),
            PatchSync.Bundle(name: "base", required: true, priority: 0, paths: ["**"])
        ]
        for number in [1, 2] {
            let build = try fixture.sampleBuild(number, scale: 0.005)
            try FileManager.default.createSymbolicLink(
                atPath: build + "/latest.map", withDestinationPath: "levels/level_2.map")
            try FileManager.default.createDirectory(atPath: build + "/saves", withIntermediateDirectories: true)
            try Data("é".utf8).write(to: URL(fileURLWithPath: build + "/café.txt"))
            if number == 2 {
                pak.replaceSubrange((2 << 20)..<((2 << 20) + 65536), with: repeatElement(9, count: 65536))
            }
            try Data(pak).write(to: URL(fileURLWithPath: build + "/data.pak"))
            try fixture.publish(build, id: "\(number)", bundles: bundles)
        }
        return (
            fixture,
            try ["1", "2"].map {
                try Data(contentsOf: URL(fileURLWithPath: try DeltaSyncTests.manifestFile(fixture, id: $0)))
            }
        )
    }

    /// The reference reader's view of `file`, or its refusal (exit status 1 and its message).
    private static func reference(_ file: String) throws -> (status: Int32, output: Data, error: String) {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        process.arguments = ["python3", ManifestTests.repoRoot + "/manifests/manifest_reader.py", file]
        let out = Pipe(), err = Pipe()
        process.standardOutput = out
        process.standardError = err
        try process.run()
        let output = out.fileHandleForReading.readDataToEndOfFile()
        let error = err.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        return (process.terminationStatus, output, String(decoding: error, as: UTF8.self))
    }

    @Test(
        "a published manifest is binary and zstd-compressed, reads back as itself byte for byte, and the reference reader sees the same files, chunks, objects, links, folders, bundles and deltas"
    )
    func agreesWithTheReferenceReader() throws {
        let (fixture, targets) = try Self.published()
        for (index, target) in targets.enumerated() {
            #expect(target.starts(with: Zstd.magic), "a target holds the manifest zstd-compressed")
            let bytes = try Manifest.unpack(target, what: "target")
            #expect(bytes.starts(with: Array("PSMF".utf8)))
            let manifest = try Manifest.decode(target, what: "target")
            #expect(manifest.formatVersion == 8)
            #expect(try manifest.encoded() == bytes, "encoding what was decoded gives the same bytes")
            let file = fixture.directory + "/target-\(index)"
            try target.write(to: URL(fileURLWithPath: file))
            let seen = try Self.reference(file)
            #expect(seen.status == 0, "the reference reader refused build \(index + 1): \(seen.error)")
            let theirs = try JSONSerialization.jsonObject(with: seen.output) as? NSDictionary
            let ours = try JSONSerialization.jsonObject(with: try manifest.json()) as? NSDictionary
            #expect(
                theirs != nil && theirs == ours, "the reference reader and the library read build \(index + 1) alike")
        }
        let second = try Manifest.decode(targets[1], what: "build 2")
        #expect(!(second.deltas ?? []).isEmpty && !(second.links ?? []).isEmpty && !(second.folders ?? []).isEmpty)
        #expect(second.files.contains { $0.chunks.contains { $0.object != nil } }, "build 2 names objects of build 1")
        #expect(Set(second.files.map(\.bundle)) == ["base", "levels"])
        #expect(second.files.contains { $0.path == "café.txt" })
    }

    /// Where the sections of the binary manifest `bytes` start.
    private struct Sections {
        let files: Int, chunks: Int, chunkObjects: Int, strings: Int, fileCount: Int, chunkObjectCount: Int
        /// Each file's first chunk.
        let firstChunks: [Int]

        init(_ bytes: Data) {
            func u32(_ at: Int) -> Int {
                Int(bytes.withUnsafeBytes { $0.loadUnaligned(fromByteOffset: at, as: UInt32.self) })
            }
            func u64(_ at: Int) -> Int {
                Int(bytes.withUnsafeBytes { $0.loadUnaligned(fromByteOffset: at, as: UInt64.self) })
            }
            fileCount = u64(16)
            chunkObjectCount = u64(32)
            files = (48 + u32(8) + 7) / 8 * 8
            chunks = files + fileCount * 88
            chunkObjects = chunks + u64(24) * 64
            strings = chunkObjects + chunkObjectCount * 32
            var first: [Int] = [], next = 0
            for file in 0..<fileCount {
                first.append(next)
                next += u32(files + file * 88 + 72)
            }
            firstChunks = first
        }
    }

    @Test(
        "a truncated binary manifest, or one that lies (unsorted paths, a chunk or object out of place, an unknown codec or bundle, a chunk in an object the table does not list, bytes after the end, a newer version), is refused by the client and by the reference reader"
    )
    func liesAreRefused() throws {
        let (fixture, targets) = try Self.published()
        let good = try Manifest.unpack(targets[1], what: "build 2")
        let at = Sections(good)
        #expect(at.fileCount > 2 && at.chunkObjectCount > 0, "build 2 has chunks in build 1's objects")
        func u32(_ data: Data, _ offset: Int) -> UInt32 {
            data.withUnsafeBytes { $0.loadUnaligned(fromByteOffset: offset, as: UInt32.self) }
        }
        func set<T: FixedWidthInteger>(_ value: T, at offset: Int, in data: inout Data) {
            withUnsafeBytes(of: value.littleEndian) { data.replaceSubrange(offset..<(offset + $0.count), with: $0) }
        }
        var lies: [(String, Data)] = []
        for cut in [47, at.files - 1, at.chunks + 5, at.chunkObjects - 70, at.strings + 1, good.count - 1] {
            lies.append(("truncated at \(cut) of \(good.count)", good.prefix(cut)))
        }
        lies.append(("a byte after the end", good + Data([0])))
        var unsorted = good
        unsorted[at.strings] = 0x7e  // "~" sorts after every other first byte of the sample's paths
        lies.append(("an unsorted file table", unsorted))
        var moreChunks = good
        set(u32(good, at.files + 72) + 1, at: at.files + 72, in: &moreChunks)
        lies.append(("file 0 claiming a chunk of file 1", moreChunks))
        var codec = good
        codec[at.chunks + 56] = 3
        lies.append(("an unknown codec", codec))
        var flagged = good
        let chunks = 0..<((at.chunkObjects - at.chunks) / 64)
        let unflagged = try #require(chunks.first { good[at.chunks + $0 * 64 + 57] & 1 == 0 })
        flagged[at.chunks + unflagged * 64 + 57] |= 1
        lies.append(("one more chunk in another object than the chunk-object table lists", flagged))
        var hashed = good
        let whole = try #require(chunks.first { good[at.chunks + $0 * 64 + 57] & 2 != 0 })
        hashed[at.chunks + whole * 64] = 1
        lies.append(("a chunk standing for its whole file with a hash of its own", hashed))
        var spelledOut = good
        spelledOut[at.chunks + whole * 64 + 57] &= ~2
        let owner = try #require(at.firstChunks.firstIndex(of: whole))
        spelledOut.replaceSubrange(
            (at.chunks + whole * 64)..<(at.chunks + whole * 64 + 32),
            with: good[(at.files + owner * 88)..<(at.files + owner * 88 + 32)])
        lies.append(("a one-chunk file's hash spelled out (a second encoding of the same manifest)", spelledOut))
        let several = try #require((0..<at.fileCount).first { u32(good, at.files + $0 * 88 + 72) > 1 })
        var split = good
        split[at.chunks + at.firstChunks[several] * 64 + 57] |= 2
        split.replaceSubrange(
            (at.chunks + at.firstChunks[several] * 64)..<(at.chunks + at.firstChunks[several] * 64 + 32),
            with: Data(count: 32))
        lies.append(("a file of several chunks whose first claims to be the whole file", split))
        var length = good
        set(UInt32(1), at: at.chunks + 48, in: &length)
        lies.append(("chunks that do not tile their file", length))
        var bundle = good
        set(UInt16(7), at: at.files + 82, in: &bundle)
        lies.append(("a bundle the head does not list", bundle))
        var reserved = good
        reserved[at.files + 84] = 1
        lies.append(("a reserved field set", reserved))
        let head = String(decoding: good[48..<(48 + Int(u32(good, 8)))], as: UTF8.self)
        var version = good
        version.replaceSubrange(
            48..<(48 + head.utf8.count),
            with: Data(head.replacingOccurrences(of: "\"formatVersion\":8", with: "\"formatVersion\":7").utf8))
        lies.append(("a head naming another format than the header", version))
        // The same head with a space in it: the header's head length and the padding follow it.
        let spacedHead = Data(head.replacingOccurrences(of: "\"buildId\":", with: "\"buildId\": ").utf8)
        var spaced = good.prefix(48)
        set(UInt32(spacedHead.count), at: 8, in: &spaced)
        spaced += spacedHead + Data(count: (8 - spacedHead.count % 8) % 8) + good[at.files...]
        lies.append(("a head spelled another way", spaced))
        if at.files > 48 + head.utf8.count {
            var padding = good
            padding[48 + head.utf8.count] = 1
            lies.append(("padding that is not zero", padding))
        }
        var newer = good
        set(UInt32(9), at: 4, in: &newer)
        lies.append(("format version 9", newer))
        for (lie, bytes) in lies {
            let refusal = #expect(throws: PatchSyncError.self, "the client refuses \(lie)") {
                try Manifest.decode(Manifest.pack(bytes), what: "build 2")
            }
            let expected =
                lie == "chunks that do not tile their file"
                ? "chunk list" : lie == "format version 9" ? "format version 9" : "binary manifest"
            #expect(refusal?.message.contains(expected) == true, "\(lie): \(refusal?.message ?? "")")
            let file = fixture.directory + "/lie"
            try Manifest.pack(bytes).write(to: URL(fileURLWithPath: file))
            let seen = try Self.reference(file)
            #expect(seen.status == 1 && seen.error.contains("refused"), "the reference reader refuses \(lie)")
        }
        let refusal = #expect(throws: PatchSyncError.self) {
            try Manifest.decode(Manifest.pack(newer), what: "build 9")
        }
        #expect(refusal?.message.contains("format version 9; this client reads versions 1 to 8") == true)
        #expect(refusal?.remedy?.contains("update PatchSync") == true)
        var frame = targets[1]
        frame.removeLast(3)
        #expect(throws: PatchSyncError.self, "a truncated zstd frame") { try Manifest.decode(frame, what: "cut") }
    }
}
