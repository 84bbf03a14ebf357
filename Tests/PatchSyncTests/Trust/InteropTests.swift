import Foundation
import PatchSyncTestSupport
import Testing

@testable import PatchSync

/// python-tuf's ngclient (installed by `make test` into .venv-tuf) refreshes from an origin served by nginx
/// and downloads a target; prints "ok LENGTH" or fails.
func pythonTUF(origin: String, root: String, target: String, in directory: String) throws -> (Int32, String) {
    let venv =
        URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent().deletingLastPathComponent().path + "/.venv-tuf/bin/python"
    let meta = directory + "/tuf-meta-\(UUID().uuidString)", dl = directory + "/tuf-dl-\(UUID().uuidString)"
    try FileManager.default.createDirectory(atPath: meta, withIntermediateDirectories: true)
    try FileManager.default.createDirectory(atPath: dl, withIntermediateDirectories: true)
    try FileManager.default.copyItem(atPath: root, toPath: meta + "/root.json")
    let result = try CLI.runProgram(
        venv,
        [
            "-c",
            """
            import sys
            from tuf.ngclient import Updater
            origin, meta, dl, target = sys.argv[1:5]
            u = Updater(bootstrap=open(meta + "/root.json", "rb").read(), metadata_dir=meta,
                        metadata_base_url=origin + "/metadata/", target_base_url=origin + "/targets/", target_dir=dl)
            u.refresh()
            info = u.get_targetinfo(target)
            assert info is not None, f"{target} not found"
            u.download_target(info)
            print("ok", info.length, info.custom["sequence"])
            """, origin, meta, dl, target
        ])
    return (result.status, result.stdout)
}

@Suite("Interop with python-tuf", .tags(.large))
struct InteropTests {
    @Test(
        "python-tuf's client reads a repository that publish wrote, after repo refresh, after rotate-root (new root and online keys) and with root and targets thresholds of 2"
    )
    func pythonTUFReadsOurRepository() throws {
        let fixture = try Fixture()
        try fixture.publish(try fixture.sampleBuild(1, scale: 0.003), id: "1.0+1")
        let nginx = try NginxOrigin(root: fixture.origin)
        let shippedRoot = fixture.directory + "/shipped-root.json"
        try FileManager.default.copyItem(atPath: fixture.rootMetadata, toPath: shippedRoot)

        var (status, output) = try pythonTUF(
            origin: nginx.url, root: shippedRoot, target: "manifests/live/1.0+1.json.gz",
            in: fixture.directory)
        #expect(status == 0 && output.hasPrefix("ok "), "\(output)")

        var repo = try Repository.load(origin: fixture.origin)
        try repo.refresh(key: fixture.onlineKey)
        try fixture.publish(try fixture.sampleBuild(2, scale: 0.003), id: "1.1+2")
        (status, output) = try pythonTUF(
            origin: nginx.url, root: shippedRoot, target: "manifests/live/1.1+2.json.gz",
            in: fixture.directory)
        #expect(status == 0 && output.hasPrefix("ok ") && output.contains(" 2"), "\(output)")

        var rotated = try Repository.load(origin: fixture.origin)  // what `repo rotate-root` does
        let (newRoot, newOnline) = (SigningKey(try Ed25519.generate()), SigningKey(try Ed25519.generate()))
        try rotated.rotateRoot(
            .init(root: [newRoot.publicKey], online: newOnline.publicKey),
            signers: .init(root: [fixture.rootKey, newRoot], online: newOnline))
        (status, output) = try pythonTUF(
            origin: nginx.url, root: shippedRoot, target: "manifests/live/1.1+2.json.gz",
            in: fixture.directory)
        #expect(status == 0 && output.hasPrefix("ok "), "\(output)")

        // Thresholds of 2: two of three root keys and both of two new targets keys sign from now on.
        let roots = try (0..<3).map { _ in SigningKey(try Ed25519.generate()) }
        let targets = try (0..<2).map { _ in SigningKey(try Ed25519.generate()) }
        try rotated.rotateRoot(
            .init(root: roots.map(\.publicKey), rootThreshold: 2, targets: targets.map(\.publicKey)),
            signers: .init(root: [newRoot, roots[0], roots[2]], targets: targets, online: newOnline))
        var options = Publisher.Options(
            buildDirectory: try fixture.sampleBuild(3, scale: 0.003), origin: fixture.origin,
            buildId: try BuildID("1.2+3"), bundles: try BundleRules(bundles: [.base]))
        options.deltaSources = 0
        #expect(throws: PatchSyncError.self, "one of two targets keys is under the threshold") {
            try Publisher(options: options, signers: .init(targets: [targets[0]], online: newOnline)).run()
        }
        try Publisher(options: options, signers: .init(targets: targets, online: newOnline)).run()
        (status, output) = try pythonTUF(
            origin: nginx.url, root: shippedRoot, target: "manifests/live/1.2+3.json.gz",
            in: fixture.directory)
        #expect(status == 0 && output.hasPrefix("ok ") && output.contains(" 3"), "\(output)")
    }

    @Test(
        "python-tuf reads a repository with a preload: the plan as the build's target before the release, and the released content key through the delegated releases role (signed by the online key) after it"
    )
    func pythonTUFReadsPreloadAndRelease() throws {
        let fixture = try Fixture()
        try fixture.publish(try fixture.sampleBuild(1, scale: 0.003), id: "1")
        var options = Publisher.Options(
            buildDirectory: try fixture.sampleBuild(2, scale: 0.003), origin: fixture.origin,
            buildId: try BuildID("2"), bundles: try BundleRules(bundles: [.base]))
        options.preload = Publisher.Preload(
            releaseAt: Date(timeIntervalSinceNow: 3600), contentKeys: fixture.keyDirectory + "/content")
        _ = try Publisher(options: options, signers: fixture.signers).run()
        let nginx = try NginxOrigin(root: fixture.origin)
        func read(_ target: String) throws -> (Int32, String) {
            let venv =
                URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
                .deletingLastPathComponent().deletingLastPathComponent().path + "/.venv-tuf/bin/python"
            let meta = fixture.directory + "/tuf-\(UUID().uuidString)"
            try FileManager.default.createDirectory(atPath: meta + "/dl", withIntermediateDirectories: true)
            try FileManager.default.copyItem(atPath: fixture.rootMetadata, toPath: meta + "/root.json")
            let result = try CLI.runProgram(
                venv,
                [
                    "-c",
                    """
                    import sys
                    from tuf.ngclient import Updater
                    origin, meta, target = sys.argv[1:4]
                    u = Updater(bootstrap=open(meta + "/root.json", "rb").read(), metadata_dir=meta,
                                metadata_base_url=origin + "/metadata/", target_base_url=origin + "/targets/", target_dir=meta + "/dl")
                    u.refresh()
                    info = u.get_targetinfo(target)
                    print("ok", info.length) if info is not None and u.download_target(info) else print("missing")
                    """, nginx.url, meta, target
                ])
            return (result.status, result.stdout + result.stderr)
        }
        var (status, output) = try read("manifests/live/2.json.gz")
        #expect(status == 0 && output.hasPrefix("ok "), "\(output)")
        (status, output) = try read("releases/live/2.key")
        #expect(status == 0 && output.hasPrefix("missing"), "not released yet: \(output)")
        var repo = try Repository.load(origin: fixture.origin)
        try repo.release(
            build: "2", channel: "live", contentKeys: fixture.keyDirectory + "/content", online: fixture.onlineKey)
        (status, output) = try read("releases/live/2.key")
        #expect(status == 0 && output.hasPrefix("ok "), "\(output)")
        try repo.refresh(key: fixture.onlineKey)
        (status, output) = try read("manifests/live/2.json.gz")
        #expect(status == 0 && output.hasPrefix("ok "), "after a refresh: \(output)")
    }

    @Test("python-tuf refuses our repository when a signature is broken (the check is real on both sides)")
    func pythonTUFRefusesTampering() throws {
        let fixture = try Fixture()
        try fixture.publish(try fixture.sampleBuild(1, scale: 0.003), id: "1")
        let nginx = try NginxOrigin(root: fixture.origin)
        let path = fixture.origin + "/metadata/timestamp.json"
        var text = try String(contentsOfFile: path, encoding: .utf8)
        let sig = try #require(text.range(of: "\"sig\":\"")).upperBound
        text.replaceSubrange(sig...sig, with: text[sig] == "0" ? "1" : "0")
        try text.write(toFile: path, atomically: true, encoding: .utf8)
        let (status, output) = try pythonTUF(
            origin: nginx.url, root: fixture.rootMetadata,
            target: "manifests/live/1.json.gz", in: fixture.directory)
        #expect(status != 0, "\(output)")
        #expect(output.contains("signature") || output.contains("Unsigned"), "\(output)")
    }
}

/// The interop and attack tables of Tests/Interop/tuf_interop.py: repositories written by python-tuf's
/// Metadata API, served by nginx, read by `patchsync-tuf-client`.
@Suite("Conformance adapter against python-tuf repositories", .tags(.large))
struct AdapterInteropTests {
    static let interop = [
        "ed25519_basic", "root_rotation", "delegations", "terminating_stops_search", "delegation_visit_limit",
        "hash_bins",
        "ecdsa_keys", "rsa_keys", "no_consistent_snapshot", "existing_target_not_refetched",
        "unchanged_metadata_not_refetched", "unusual_role_names",
        "fast_forward_recovery", "fast_forward_snapshot_recovery", "target_name_stays_inside"
    ]
    static let attacks = [
        "rollback_timestamp", "rollback_snapshot", "rollback_targets", "rollback_snapshot_drops_role",
        "freeze_timestamp", "freeze_timestamp_faketime", "freeze_snapshot", "freeze_targets", "freeze_root",
        "fast_forward_without_rotation", "revoked_timestamp_key", "mix_and_match_targets",
        "wrong_snapshot_hash", "wrong_snapshot_length", "wrong_targets_hash", "wrong_targets_length",
        "endless_timestamp", "endless_root", "endless_target", "arbitrary_target",
        "root_threshold_not_met", "targets_threshold_not_met", "duplicate_key_counts_once",
        "key_hex_case_counts_once", "duplicate_signature_keyid", "initial_root_not_self_signed",
        "bad_timestamp_signature", "old_metadata_mirror", "delegated_wrong_key", "delegated_outside_paths"
    ]

    @Test("python-tuf repositories are read, and every attack in the table exits 1 with trusted metadata unchanged")
    func tables() throws {
        let repoRoot = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().deletingLastPathComponent().path
        let fixture = try Fixture()
        let served = fixture.directory + "/served", work = fixture.directory + "/work"
        try FileManager.default.createDirectory(atPath: served, withIntermediateDirectories: true)
        try FileManager.default.createDirectory(atPath: work, withIntermediateDirectories: true)
        let nginx = try NginxOrigin(root: served)
        let adapter = CLI.productsDirectory + "/patchsync-tuf-client"
        let result = try CLI.runProgram(
            repoRoot + "/.venv-tuf/bin/python",
            [repoRoot + "/Tests/Interop/tuf_interop.py", adapter, served, nginx.url, work])
        let lines = result.stdout.split(separator: "\n").map(String.init)
        for name in Self.interop.map({ "interop/" + $0 }) + Self.attacks.map({ "attack/" + $0 }) {
            #expect(lines.contains { $0.hasPrefix("PASS \(name):") }, "\(name) did not pass:\n\(result.stdout)")
        }
        #expect(result.status == 0, "\(result.stdout)")
        withExtendedLifetime(nginx) {}
    }
}
