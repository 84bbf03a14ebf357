import Foundation
import PatchSync

/// A game-shaped build tree generated deterministically from a seed: incompressible
/// texture- and audio-like blobs, compressible level, script and text files, and a
/// few large packed archives. Build 2 changes about 5% of build 1: edits, inserts and
/// deletes inside large files, new and removed files, a renamed file.
public struct SampleGame: Sendable {
    public var seed: UInt64
    /// 1.0 gives about 100 MB; tests use a small fraction.
    public var scale: Double

    public init(seed: UInt64 = 2026, scale: Double = 1.0) {
        self.seed = seed
        self.scale = scale
    }

    /// Writes build `number` (1 or 2) into `directory`, which must not exist or be empty.
    public func write(build number: Int, into directory: String) throws {
        for (path, content) in files(build: number) {
            let full = directory + "/" + path
            try FileManager.default.createDirectory(
                atPath: (full as NSString).deletingLastPathComponent,
                withIntermediateDirectories: true)
            try Data(content.bytes).write(to: URL(fileURLWithPath: full))
            let mode: Int16 = content.executable ? 0o755 : 0o644
            try FileManager.default.setAttributes([.posixPermissions: mode], ofItemAtPath: full)
        }
    }

    /// The sample's bundles: the game's code, levels and English text, and its textures, are required;
    /// its sound effects and music (`hd-audio`) and the other languages are optional.
    public static let bundles: [PatchSync.Bundle] = [
        PatchSync.Bundle(
            name: "base", required: true, priority: 0,
            paths: ["bin/**", "config/**", "scripts/**", "levels/**", "packs/**", "text/en.po"]),
        PatchSync.Bundle(name: "hd-audio", required: false, priority: 1, paths: ["audio/**"]),
        PatchSync.Bundle(name: "languages", required: false, priority: 2, paths: ["text/**"]),
        PatchSync.Bundle(name: "textures", required: true, priority: 1, paths: ["**"])
    ]

    /// Writes the sample's bundles file (for `patchsync publish --bundles`).
    public static func writeBundles(to path: String) throws {
        struct File: Encodable { var bundles: [PatchSync.Bundle] }
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes]
        try encoder.encode(File(bundles: bundles)).write(to: URL(fileURLWithPath: path))
    }

    struct Content {
        var bytes: [UInt8]
        var executable = false
    }

    /// The files of a build: path → content.
    func files(build number: Int) -> [(String, Content)] {
        var files = baseFiles()
        if number >= 2 { applyPatch(&files) }
        return files.sorted { $0.key < $1.key }.map { ($0.key, $0.value) }
    }

    private func size(_ base: Int, _ rng: inout SeededRandom) -> Int {
        max(1, Int(Double(base) * scale * (0.5 + rng.unit())))
    }

    private func baseFiles() -> [String: Content] {
        var rng = SeededRandom(seed: seed)
        var files: [String: Content] = [:]
        for i in 0..<120 { files["textures/tex_\(i).dds"] = Content(bytes: rng.bytes(size(330_000, &rng))) }
        for i in 0..<40 { files["audio/sfx_\(i).ogg"] = Content(bytes: rng.bytes(size(500_000, &rng))) }
        for i in 0..<60 {
            files["levels/level_\(i).map"] = Content(bytes: rng.text(size(250_000, &rng), style: .level))
        }
        for i in 0..<150 {
            files["scripts/s\(i / 30)/script_\(i).lua"] = Content(bytes: rng.text(size(12_000, &rng), style: .script))
        }
        for lang in ["en", "de", "fr", "es", "ja", "pt", "ru", "it", "pl", "ko"] {
            files["text/\(lang).po"] = Content(bytes: rng.text(size(100_000, &rng), style: .script))
        }
        for i in 0..<3 { files["packs/data\(i).pak"] = Content(bytes: pack(size(6_500_000, &rng), &rng)) }
        files["bin/game"] = Content(bytes: rng.bytes(size(1_500_000, &rng)), executable: true)
        files["config/default.cfg"] = Content(bytes: Array("fullscreen=1\nvsync=1\n".utf8))
        return files
    }

    /// A packed archive: alternating incompressible and compressible blocks.
    private func pack(_ length: Int, _ rng: inout SeededRandom) -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(length)
        while out.count < length {
            let block = min(length - out.count, 16_384 + Int(rng.next() % 200_000))
            out += rng.next() % 2 == 0 ? rng.bytes(block) : rng.text(block, style: .level)
        }
        return out
    }

    /// About 5% of change, of every kind a real release has.
    private func applyPatch(_ files: inout [String: Content]) {
        var rng = SeededRandom(seed: seed ^ 0xB0B)
        for i in stride(from: 0, to: 120, by: 20) {
            files["textures/tex_\(i).dds"]?.bytes = rng.bytes(size(330_000, &rng))
        }
        for i in 0..<4 { files["textures/new_\(i).dds"] = Content(bytes: rng.bytes(size(330_000, &rng))) }
        for i in 0..<2 {
            files["levels/new_level_\(i).map"] = Content(bytes: rng.text(size(250_000, &rng), style: .level))
        }
        for i in [3, 17, 44, 90] { files["scripts/s\(i / 30)/script_\(i).lua"] = nil }
        files["audio/sfx_5.ogg"] = nil
        files["audio/music/theme.ogg"] = files.removeValue(forKey: "audio/sfx_7.ogg")  // renamed
        for i in [2, 11, 30, 41, 55] { edit(&files["levels/level_\(i).map"]!.bytes, &rng, overwrite: 200) }
        editPack(&files["packs/data0.pak"]!.bytes, &rng, insert: 10_000)
        editPack(&files["packs/data1.pak"]!.bytes, &rng, insert: -20_000)
        edit(&files["packs/data2.pak"]!.bytes, &rng, overwrite: 4_096)
        files["config/default.cfg"]!.bytes += Array("shadows=high\n".utf8)
    }

    private func edit(_ bytes: inout [UInt8], _ rng: inout SeededRandom, overwrite length: Int) {
        let at = Int(rng.next() % UInt64(max(1, bytes.count - length)))
        let patch = rng.bytes(min(length, bytes.count - at))
        bytes.replaceSubrange(at..<(at + patch.count), with: patch)
    }

    private func editPack(_ bytes: inout [UInt8], _ rng: inout SeededRandom, insert delta: Int) {
        let at = bytes.count / 2 + Int(rng.next() % 1000)
        if delta > 0 {
            bytes.insert(contentsOf: rng.bytes(delta), at: at)
        } else {
            bytes.removeSubrange(at..<min(bytes.count, at - delta))
        }
        edit(&bytes, &rng, overwrite: 4_096)
    }
}

/// xoshiro256** seeded through SplitMix64: the same seed gives the same bytes everywhere.
public struct SeededRandom: RandomNumberGenerator, Sendable {
    private var s: (UInt64, UInt64, UInt64, UInt64)

    public init(seed: UInt64) {
        var x = seed
        func mix() -> UInt64 {
            x &+= 0x9E37_79B9_7F4A_7C15
            var z = x
            z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
            z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
            return z ^ (z >> 31)
        }
        s = (mix(), mix(), mix(), mix())
    }

    public mutating func next() -> UInt64 {
        let result = ((s.1 &* 5) << 7 | (s.1 &* 5) >> 57) &* 9
        let t = s.1 << 17
        s.2 ^= s.0
        s.3 ^= s.1
        s.1 ^= s.2
        s.0 ^= s.3
        s.2 ^= t
        s.3 = s.3 << 45 | s.3 >> 19
        return result
    }

    mutating func unit() -> Double { Double(next() >> 11) / Double(1 << 53) }

    /// `count` incompressible bytes.
    public mutating func bytes(_ count: Int) -> [UInt8] {
        var out = [UInt8](repeating: 0, count: count)
        out.withUnsafeMutableBytes { raw in
            var i = 0
            while i + 8 <= count {
                raw.storeBytes(of: next(), toByteOffset: i, as: UInt64.self)
                i += 8
            }
            while i < count {
                raw[i] = UInt8(truncatingIfNeeded: next())
                i += 1
            }
        }
        return out
    }

    enum TextStyle { case level, script }

    /// `count` bytes of compressible, structured text.
    mutating func text(_ count: Int, style: TextStyle) -> [UInt8] {
        let words =
            style == .level
            ? ["entity", "tree", "rock", "spawn", "light", "trigger", "water", "path", "npc", "chest"]
            : ["local", "function", "end", "if", "then", "return", "self", "player", "health", "msgid"]
        var out: [UInt8] = []
        out.reserveCapacity(count + 64)
        while out.count < count {
            let w = words[Int(next() % UInt64(words.count))]
            let line =
                style == .level
                ? "\(w) id=\(next() % 100_000) pos=(\(next() % 4096), \(next() % 256), \(next() % 4096)) rot=\(next() % 360)\n"
                : "  \(w) \(words[Int(next() % 10)])_\(next() % 500) = \(words[Int(next() % 10)])(\(next() % 100))\n"
            out += Array(line.utf8)
        }
        return Array(out[0..<count])
    }
}
