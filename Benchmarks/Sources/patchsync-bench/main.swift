import Foundation
// patchsync-bench cpu-limit ORIGIN MANIFEST THREADS
//   Prints the seconds this machine needs to inflate and hash every chunk of MANIFEST from the
//   objects of ORIGIN (already read into memory) on THREADS threads, as one JSON object.
// patchsync-bench publish-limit TREE THREADS
//   Prints the seconds this machine needs to chunk, hash and deflate every file under TREE as
//   publish does, on THREADS threads, writing nothing, as one JSON object.
// patchsync-bench store-limit THREADS TREE...
//   For each TREE in order, one JSON line: its chunks, and those no earlier TREE had with the bytes they
//   take stored (each compressed alone, as publish stores a chunk): what a store of each chunk once grows by.
// patchsync-bench manifest-codec MANIFEST
//   One JSON line: MANIFEST's bytes as gzip'd JSON (format 7) and as the binary manifest (format 8, raw
//   and zstd as published), and the seconds to unpack and decode each (validated) and to encode the binary.
// patchsync-bench manifest-delta OLD NEW
//   One JSON line: what rebuilds NEW's manifest from OLD's, by encoding (JSON view, binary) and delta
//   (ours deflated, zstd's prefix mode), beside each whole manifest compressed.
@_spi(Benchmarks) import PatchSync

let arguments = CommandLine.arguments
func usage() -> Never {
    FileHandle.standardError.write(
        Data(
            ("usage: patchsync-bench cpu-limit ORIGIN MANIFEST THREADS | publish-limit TREE THREADS"
                + " | store-limit THREADS TREE... | manifest-codec MANIFEST | manifest-delta OLD NEW\n").utf8))
    exit(64)
}
do {
    switch (arguments.dropFirst().first, arguments.count) {
    case ("cpu-limit", 5):
        guard let threads = Int(arguments[4]) else { usage() }
        let r = try CPULimit.inflateAndHash(origin: arguments[2], manifest: arguments[3], threads: threads)
        print(
            "{\"seconds\":\(r.seconds),\"chunks\":\(r.chunks),\"storedBytes\":\(r.storedBytes),\"contentBytes\":\(r.contentBytes)}"
        )
    case ("publish-limit", 4):
        guard let threads = Int(arguments[3]) else { usage() }
        let r = try PublishLimit.chunkHashDeflate(tree: arguments[2], threads: threads)
        print("{\"seconds\":\(r.seconds),\"files\":\(r.files),\"bytes\":\(r.bytes),\"storedBytes\":\(r.storedBytes)}")
    case ("store-limit", 4...):
        guard let threads = Int(arguments[2]) else { usage() }
        for r in try StoreLimit.uniqueChunks(trees: Array(arguments.dropFirst(3)), threads: threads) {
            print(
                "{\"files\":\(r.files),\"bytes\":\(r.bytes),\"chunks\":\(r.chunks),\"newChunks\":\(r.newChunks),"
                    + "\"newStoredBytes\":\(r.newStoredBytes)}")
        }
    case ("manifest-codec", 3):
        let r = try ManifestCodecLimit.measure(manifest: arguments[2])
        print(
            "{\"files\":\(r.files),\"chunks\":\(r.chunks),\"gzipJSONBytes\":\(r.gzipJSONBytes),"
                + "\"jsonBytes\":\(r.jsonBytes),\"binaryBytes\":\(r.binaryBytes),\"zstdBinaryBytes\":\(r.zstdBinaryBytes),"
                + "\"jsonDecodeSeconds\":\(r.jsonDecodeSeconds),\"binaryEncodeSeconds\":\(r.binaryEncodeSeconds),"
                + "\"binaryDecodeSeconds\":\(r.binaryDecodeSeconds)}")
    case ("manifest-delta", 4):
        let figures = try ManifestDeltaLimit.measure(old: arguments[2], new: arguments[3])
        print("{" + figures.sorted { $0.key < $1.key }.map { "\"\($0.key)\":\($0.value)" }.joined(separator: ",") + "}")
    default:
        usage()
    }
} catch {
    FileHandle.standardError.write(Data("patchsync-bench: \(error)\n".utf8))
    exit(65)
}
