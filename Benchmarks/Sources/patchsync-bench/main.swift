// patchsync-bench cpu-limit ORIGIN MANIFEST THREADS
// Prints the seconds this machine needs to inflate and hash every chunk of MANIFEST from the
// objects of ORIGIN (already read into memory) on THREADS threads, as one JSON object.
@_spi(Benchmarks) import PatchSync
import Foundation

let arguments = CommandLine.arguments
guard arguments.count == 5, arguments[1] == "cpu-limit", let threads = Int(arguments[4]) else {
    FileHandle.standardError.write(Data("usage: patchsync-bench cpu-limit ORIGIN MANIFEST THREADS\n".utf8))
    exit(64)
}
do {
    let r = try CPULimit.inflateAndHash(origin: arguments[2], manifest: arguments[3], threads: threads)
    print("{\"seconds\":\(r.seconds),\"chunks\":\(r.chunks),\"storedBytes\":\(r.storedBytes),\"contentBytes\":\(r.contentBytes)}")
} catch {
    FileHandle.standardError.write(Data("patchsync-bench: \(error)\n".utf8))
    exit(65)
}
