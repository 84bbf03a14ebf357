// patchsync-sample: generates the bundled sample game and serves an origin with nginx,
// for `make demo` and for benchmarks.
import Foundation
import PatchSyncTestSupport

let arguments = Array(CommandLine.arguments.dropFirst())

func value(_ flag: String) -> String? {
    guard let i = arguments.firstIndex(of: flag), i + 1 < arguments.count else { return nil }
    return arguments[i + 1]
}

func usage() -> Never {
    FileHandle.standardError.write(
        Data(
            """
            usage: patchsync-sample generate --build N --out DIR [--scale 1.0] [--seed 2026]
                   patchsync-sample bundles --out FILE
                   patchsync-sample serve --root DIR --url-file FILE
              generate  writes build N (1 or 2) of the sample game into DIR
              bundles   writes the sample's bundles file (required base and textures, optional
                        hd-audio and languages) for `patchsync publish --bundles`
              serve     runs nginx on a free loopback port serving DIR, writes its URL to FILE,
                        and stops it on SIGTERM or SIGINT

            """.utf8))
    exit(64)
}

switch arguments.first {
case "generate":
    guard let out = value("--out"), let build = value("--build").flatMap(Int.init) else { usage() }
    let game = SampleGame(
        seed: value("--seed").flatMap(UInt64.init) ?? 2026,
        scale: value("--scale").flatMap(Double.init) ?? 1.0)
    do { try game.write(build: build, into: out) } catch {
        FileHandle.standardError.write(Data("error: generating the sample: \(error)\n".utf8))
        exit(74)
    }
case "bundles":
    guard let out = value("--out") else { usage() }
    do { try SampleGame.writeBundles(to: out) } catch {
        FileHandle.standardError.write(Data("error: writing \(out): \(error)\n".utf8))
        exit(74)
    }
case "serve":
    guard let root = value("--root"), let urlFile = value("--url-file") else { usage() }
    do {
        let origin = try NginxOrigin(root: root)
        try origin.url.write(toFile: urlFile, atomically: true, encoding: .utf8)
        signal(SIGTERM, SIG_IGN)
        signal(SIGINT, SIG_IGN)
        let stop = DispatchSemaphore(value: 0)
        let sources = [SIGTERM, SIGINT].map { sig in
            let source = DispatchSource.makeSignalSource(signal: sig)
            source.setEventHandler { stop.signal() }
            source.resume()
            return source
        }
        stop.wait()
        withExtendedLifetime(sources) { origin.stop() }
    } catch {
        FileHandle.standardError.write(Data("error: \(error.localizedDescription)\n".utf8))
        exit(69)
    }
default:
    usage()
}
