// A launcher written in Swift, using the PatchSync library directly:
// apply what is ready, start the game, and sync the next build in the background
// while it runs (sync never touches the live tree), cancelling it if the game exits first.
//
//   swift run launcher-example ~/Games/forest ./bin/game --fullscreen
import Foundation
import PatchSync

let arguments = CommandLine.arguments.dropFirst()
guard let folder = arguments.first, let game = arguments.dropFirst().first else {
    print("usage: launcher-example INSTALL_DIR GAME [ARGS…]")
    exit(64)
}

do {
    let install = try Install.open(at: folder)

    let session = install.startSync()
    let progress = Task {
        for await event in session.events {
            switch event {
            case .phase(_, let text): print("sync: \(text)")
            case .transfer(let s):
                print("sync: \(s.updateDone ?? s.done) of \(s.updateTotal ?? s.total) bytes")
            case .bundles(let progress):
                let pending = progress.bundles.filter { $0.state == .pending }.map(\.name)
                print(
                    "sync: build \(progress.buildId) \(progress.playable ? "is playable" : "is not playable yet")"
                        + (pending.isEmpty ? "" : "; still coming: \(pending.joined(separator: ", "))"))
            case .preload(let status): print("sync: \(status.summary)")
            case .stalled(let seconds): print("sync: no data for \(seconds) s, retrying (check the connection)")
            }
        }
    }
    // The launcher applies a ready build when it can (never blocked by the sync above), then starts the game.
    let exitStatus = try GameLauncher(install: install).launch(game, Array(arguments.dropFirst(2))) { apply in
        if let skipped = apply.skipped { print("starting the current build without applying: \(skipped)") }
        if apply.report?.applied == true { print("updated to build \(apply.report?.current ?? "?")") }
        print("playing build \(install.currentDeployment() ?? "none")")
    }
    session.cancel()  // the game is done; a later start picks the sync up where it stopped
    _ = try? await session.result()
    await progress.value
    exit(exitStatus)
} catch {
    print("error: \(error.description)")
    if let remedy = error.remedy { print("hint: \(remedy)") }
    exit(1)
}
