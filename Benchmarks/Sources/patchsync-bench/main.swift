import Foundation
// patchsync-bench cpu-limit ORIGIN MANIFEST THREADS
//   Prints the seconds this machine needs to inflate and hash every chunk of MANIFEST from the
//   objects of ORIGIN (already read into memory) on THREADS threads, as one JSON object.
// patchsync-bench publish-limit TREE THREADS
//   Prints the seconds this machine needs to chunk, hash and deflate every file under TREE as
//   publish does, on THREADS threads, writing nothing, as one JSON object.
@_spi(Benchmarks) import PatchSync

let arguments = CommandLine.arguments
func usage() -> Never {
    FileHandle.standardError.write(
        Data("usage: patchsync-bench cpu-limit ORIGIN MANIFEST THREADS | publish-limit TREE THREADS\n".utf8))
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
    default:
        usage()
    }
} catch {
    FileHandle.standardError.write(Data("patchsync-bench: \(error)\n".utf8))
    exit(65)
}
