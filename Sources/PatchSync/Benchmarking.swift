import Foundation
import Synchronization

/// Measurements for `Benchmarks/transfer.sh`: what the client's CPU work costs on its own.
@_spi(Benchmarks)
public enum CPULimit {
    public struct Result: Sendable {
        public var seconds: Double
        public var chunks: Int
        public var storedBytes: Int64
        public var contentBytes: Int64
    }

    /// Inflates and hashes every distinct chunk of a manifest from the objects of a published
    /// origin, already in memory, on `threads` threads, the way a sync's workers do
    /// (``ChunkEntry/verifiedContent(of:scratch:decompressor:)``); checks each hash. The bound that a sync
    /// over an infinitely fast network cannot beat (it also writes, and the network costs CPU).
    public static func inflateAndHash(origin: String, manifest path: String, threads: Int) throws -> Result {
        let manifest = try Manifest.decode(try FileSystem.read(path, limit: 1 << 30), what: path)
        var seen = Set<SHA256Digest>()
        // Each chunk with the object file (a segment) it is in, and its offset there.
        let naming = ObjectNaming(format: manifest.formatVersion)
        var list: [(ChunkEntry, String)] = []
        for file in manifest.files {
            for var chunk in file.chunks where seen.insert(chunk.sha256).inserted {
                let segment = naming.segment(of: chunk.objectOffset)
                chunk.objectOffset -= naming.base(of: segment)
                list.append((chunk, naming.path(chunk.object(in: file), segment: segment)))
            }
        }
        var loaded: [String: Data] = [:]
        for object in Set(list.map(\.1)) {
            loaded[object] = try FileSystem.read(OriginLayout(root: origin).path(object), limit: 1 << 40)
        }
        let (chunks, objects) = (list, loaded)
        let stored = chunks.reduce(Int64(0)) { $0 + Int64($1.0.objectLength) }
        let content = chunks.reduce(Int64(0)) { $0 + Int64($1.0.length) }
        let count = max(1, threads)
        let failures = Mutex(0)
        let started = ContinuousClock.now
        DispatchQueue.concurrentPerform(iterations: count) { worker in
            let buffer = UnsafeMutableRawBufferPointer.allocate(
                byteCount: chunks.map(\.0.length).max() ?? 1, alignment: 16)
            defer { buffer.deallocate() }
            let decompressor = Decompressor()
            var bad = 0
            for index in stride(from: worker, to: chunks.count, by: count) {
                let (chunk, object) = chunks[index]
                objects[object, default: Data()].withUnsafeBytes { raw in
                    let start = Int(chunk.objectOffset)
                    let stored = UnsafeRawBufferPointer(rebasing: raw[start..<(start + chunk.objectLength)])
                    if chunk.verifiedContent(of: stored, scratch: buffer, decompressor: decompressor) == nil {
                        bad += 1
                    }
                }
            }
            failures.withLock { $0 += bad }
        }
        let elapsed = ContinuousClock.now - started
        guard failures.withLock({ $0 }) == 0 else {
            throw PatchSyncError(
                .refusedData, "\(failures.withLock { $0 }) chunks of \(path) do not match their hashes")
        }
        return Result(seconds: elapsed / .seconds(1), chunks: chunks.count, storedBytes: stored, contentBytes: content)
    }
}

/// Measurements for `Benchmarks/publish.sh`: what publishing's CPU work costs on its own.
@_spi(Benchmarks)
public enum PublishLimit {
    public struct Result: Sendable {
        public var seconds: Double
        public var files: Int
        public var bytes: Int64
        public var storedBytes: Int64
    }

    /// Chunks, hashes and deflates every file under `tree` exactly as `publish` does
    /// (``ObjectWriter/describe(file:)``: content-defined chunks, SHA-256 of each chunk and of the
    /// file, the level-1 samples, the default codec (zstd 3) where it pays) on `threads` threads, writing nothing.
    /// The bound that a publish with free file creation and free disk writes cannot beat.
    public static func chunkHashDeflate(
        tree: String, threads: Int,
        chunking: ChunkingParameters = .standard
    ) throws -> Result {
        let paths = try BuildFolder.scan(tree, dereferenceExternal: true).files.map { tree + "/" + $0 }
        let writer = ObjectWriter(chunker: try Chunker(chunking), origin: "/nonexistent")
        let totals = Mutex((bytes: Int64(0), stored: Int64(0), failure: String?.none))
        let started = ContinuousClock.now
        // As publish does: each worker takes the next file (at most `threads` at once).
        let next = Mutex(0)
        DispatchQueue.concurrentPerform(iterations: max(1, threads)) { _ in
            var bytes: Int64 = 0, stored: Int64 = 0
            while case let index = next.withLock({ n in
                defer { n += 1 }
                return n
            }), index < paths.count {
                do {
                    let result = try writer.describe(file: paths[index])
                    bytes += result.size
                    stored += result.bytesWritten
                } catch {
                    totals.withLock { $0.failure = $0.failure ?? "\(error)" }
                }
            }
            totals.withLock {
                $0.bytes += bytes
                $0.stored += stored
            }
        }
        let elapsed = ContinuousClock.now - started
        let result = totals.withLock { $0 }
        if let failure = result.failure { throw PatchSyncError(.localIO, failure) }
        return Result(
            seconds: elapsed / .seconds(1), files: paths.count, bytes: result.bytes, storedBytes: result.stored)
    }
}

/// Measurements for `Benchmarks/store.sh`: what an origin that stores each chunk once would hold.
@_spi(Benchmarks)
public enum StoreLimit {
    public struct Release: Sendable {
        public var files: Int
        public var bytes: Int64
        public var chunks: Int
        /// Chunks no earlier tree (and no earlier file of this one) had, and their bytes as publish
        /// stores a chunk (compressed alone with the default codec where it pays).
        public var newChunks: Int
        public var newStoredBytes: Int64
    }

    /// For each tree in order, the chunks it adds to all the trees before it: the growth of a store
    /// that keeps each chunk once, beside today's, which stores each new or changed file whole.
    public static func uniqueChunks(
        trees: [String], threads: Int, chunking: ChunkingParameters = .standard
    ) throws -> [Release] {
        let writer = ObjectWriter(chunker: try Chunker(chunking), origin: "/nonexistent")
        var seen = Set<SHA256Digest>()
        var releases: [Release] = []
        for tree in trees {
            let paths = try BuildFolder.scan(tree, dereferenceExternal: true).files.map { tree + "/" + $0 }
            let described = Mutex([Int: [ChunkEntry]]())
            let failure = Mutex(String?.none)
            let next = Mutex(0)
            DispatchQueue.concurrentPerform(iterations: max(1, threads)) { _ in
                while case let index = next.withLock({ n in
                    defer { n += 1 }
                    return n
                }), index < paths.count {
                    do {
                        let chunks = try writer.describe(file: paths[index]).chunks
                        described.withLock { $0[index] = chunks }
                    } catch {
                        failure.withLock { $0 = $0 ?? "\(error)" }
                    }
                }
            }
            if let failure = failure.withLock({ $0 }) { throw PatchSyncError(.localIO, failure) }
            var release = Release(files: paths.count, bytes: 0, chunks: 0, newChunks: 0, newStoredBytes: 0)
            for chunks in described.withLock({ $0 }).sorted(by: { $0.key < $1.key }).map(\.value) {
                for chunk in chunks {
                    release.bytes += Int64(chunk.length)
                    release.chunks += 1
                    guard seen.insert(chunk.sha256).inserted else { continue }
                    release.newChunks += 1
                    release.newStoredBytes += Int64(chunk.objectLength)
                }
            }
            releases.append(release)
        }
        return releases
    }
}

/// What a manifest costs on the wire and to decode: its JSON view gzip'd (a format 7 target) against the
/// binary manifest zstd-compressed (a format 8 target), with the seconds to unpack and decode each and
/// to encode the binary one.
@_spi(Benchmarks)
public enum ManifestCodecLimit {
    public struct Figures: Sendable {
        public var files = 0, chunks = 0
        public var gzipJSONBytes = 0, jsonBytes = 0, binaryBytes = 0, zstdBinaryBytes = 0
        public var jsonDecodeSeconds = 0.0, binaryDecodeSeconds = 0.0, binaryEncodeSeconds = 0.0
    }

    public static func measure(manifest path: String) throws(PatchSyncError) -> Figures {
        var figures = Figures()
        let manifest = try Manifest.decode(try FileSystem.read(path, limit: 1 << 31), what: path)
        figures.files = manifest.files.count
        figures.chunks = manifest.files.reduce(0) { $0 + $1.chunks.count }
        let json = try manifest.json(), gzipJSON = Manifest.pack(json)
        figures.jsonBytes = json.count
        figures.gzipJSONBytes = gzipJSON.count
        let clock = ContinuousClock()
        var binary = Data()
        var failure: PatchSyncError?
        figures.binaryEncodeSeconds = seconds(
            clock.measure {
                do throws(PatchSyncError) { binary = try ManifestBinary.encode(manifest) } catch { failure = error }
            })
        if let failure { throw failure }
        let packed = Manifest.pack(binary)
        figures.binaryBytes = binary.count
        figures.zstdBinaryBytes = packed.count
        var fromJSON: Manifest?, fromBinary: Manifest?
        figures.jsonDecodeSeconds = seconds(
            clock.measure { fromJSON = try? Manifest.decode(gzipJSON, what: path, jsonView: true) })
        figures.binaryDecodeSeconds = seconds(clock.measure { fromBinary = try? Manifest.decode(packed, what: path) })
        guard fromJSON == manifest, fromBinary == manifest else {
            throw PatchSyncError(.internal, "a manifest did not read back as itself")
        }
        return figures
    }

    private static func seconds(_ duration: Duration) -> Double {
        Double(duration.components.seconds) + Double(duration.components.attoseconds) / 1e18
    }
}

/// What a player on OLD fetches to rebuild NEW's manifest, by encoding and delta: our delta encoder
/// (deflated, as published) and zstd's prefix mode (`--patch-from`), each of the JSON view and of the
/// binary manifest; with the whole manifests compressed for scale.
@_spi(Benchmarks)
public enum ManifestDeltaLimit {
    public static func measure(old: String, new: String) throws(PatchSyncError) -> [String: Int] {
        let a = try Manifest.decode(try FileSystem.read(old, limit: 1 << 30), what: old, validating: false)
        let b = try Manifest.decode(try FileSystem.read(new, limit: 1 << 30), what: new, validating: false)
        var figures: [String: Int] = [:]
        let encodings: [(String, Data, Data)] = [
            ("json", try a.json(), try b.json()),
            ("binary", try ManifestBinary.encode(a), try ManifestBinary.encode(b))
        ]
        for (name, from, to) in encodings {
            figures[name + "Bytes"] = to.count
            figures[name + "Whole"] = Manifest.pack(to, level: 19).count
            figures[name + "OurDelta"] = Publisher.manifestDelta(from: from, to: to)?.stored.count ?? -1
            figures[name + "ZstdPrefix"] = from.withUnsafeBytes { f in
                to.withUnsafeBytes { Zstd.compress($0, prefix: f, level: 19).count }
            }
        }
        return figures
    }
}
