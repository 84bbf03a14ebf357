import Foundation
import PatchSync
import PatchSyncTestSupport
import Testing

/// Runs python3 with a script and arguments; returns its exit status and output.
func python(_ script: String, _ arguments: [String]) throws -> (Int32, String) {
    let result = try CLI.runProgram("/usr/bin/env", ["python3", "-c", script] + arguments)
    return (result.status, result.stdout)
}

@Suite("patchsync diff", .tags(.cli))
struct DiffCLITests {
    static var repoRoot: String {
        URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().path
    }

    @Test("diff of two build folders: --json validates against manifests/diff.schema.json and adds up")
    func json() throws {
        let fixture = try Fixture()
        let old = try fixture.sampleBuild(1, scale: 0.005), new = try fixture.sampleBuild(2, scale: 0.005)
        let result = try CLI.run(["diff", old, new, "--json"])
        #expect(result.status == 0, "\(result.stderr)")
        let path = fixture.directory + "/diff.json"
        try Data(result.stdout.utf8).write(to: URL(fileURLWithPath: path))
        let (status, output) = try python(
            """
            import json, sys, jsonschema
            schema = json.load(open(sys.argv[1])); report = json.load(open(sys.argv[2]))
            jsonschema.Draft202012Validator.check_schema(schema); jsonschema.validate(report, schema)
            assert report["total"]["downloadBytes"] == sum(f["downloadBytes"] for f in report["files"])
            assert report["total"]["filesAdded"] == 7 and report["total"]["filesRemoved"] == 6, report["total"]
            """, [Self.repoRoot + "/manifests/diff.schema.json", path])
        #expect(status == 0, "\(output)")
    }

    @Test(
        "a patch over its budget exits 65 and explains the overrun, in total and per bundle; the verdict is printed in text, JSON and HTML (with the removed files) when it passes too"
    )
    func budget() throws {
        let fixture = try Fixture()
        let old = try fixture.sampleBuild(1, scale: 0.005), new = try fixture.sampleBuild(2, scale: 0.005)
        let within = try CLI.run(["diff", old, new, "--budget", "100M", "--html", fixture.directory + "/patch.html"])
        #expect(
            within.status == 0 && within.stdout.contains("within budget: total "),
            "a passing budget says so: \(within.stdout)")
        let page = try String(contentsOfFile: fixture.directory + "/patch.html", encoding: .utf8)
        #expect(
            page.contains("id=\"budget\" class=\"within\"") && page.contains("<ul id=\"removed\"><li>"),
            "the page shows the verdict and the removed files")
        let lines = try CLI.run(["diff", old, new, "--budget", "100M", "--budget", "base=1K", "--json"]).stdout.split(
            separator: "\n")
        let json = try lastJSON(String(try #require(lines.first)))  // the report; the error object follows it
        let verdict = try #require(json["budget"] as? [String: Any])
        #expect(verdict["within"] as? Bool == false && (verdict["limits"] as? [Any])?.count == 2, "\(verdict)")
        let over = try CLI.run(["diff", old, new, "--budget", "10K"])
        #expect(over.status == 65)
        #expect(over.stderr.contains("over the 10.0 KiB budget"))
        #expect(over.stderr.contains("largest contributors: packs/"))
        let bundle = try CLI.run(["diff", old, new, "--budget", "base=1K"])
        #expect(bundle.status == 65)
        #expect(bundle.stderr.contains("bundle base downloads"))
        #expect(try CLI.run(["diff", old, new, "--budget", "lots"]).status == 64)
    }

    @Test(
        "a budget beyond Int64 bytes is a usage error (64) naming it, not a crash, in total and per bundle",
        arguments: ["1e30", "inf", "8388608T", "base=1e30"])
    func budgetOutOfRange(spec: String) throws {
        let fixture = try Fixture()
        let old = try fixture.sampleBuild(1, scale: 0.002), new = try fixture.sampleBuild(2, scale: 0.002)
        let result = try CLI.run(["diff", old, new, "--budget", spec])
        #expect(result.status == 64, "\(spec): \(result.status) \(result.stderr)")
        let size = spec.split(separator: "=").last.map(String.init) ?? spec
        #expect(result.stderr.contains("'\(size)' is out of range"), "\(result.stderr)")
    }

    @Test("an origin URL is verified from --root; an install is its current build; the numbers agree")
    func originAndInstall() throws {
        let fixture = try Fixture()
        let b1 = try fixture.sampleBuild(1, scale: 0.005), b2 = try fixture.sampleBuild(2, scale: 0.005)
        try fixture.publish(b1, id: "1")
        let install = try fixture.makeInstall(remotes: [fixture.fileRemote])
        _ = try CLI.run(["sync", "--install", install.root])
        _ = try CLI.run(["apply", "--install", install.root])
        try fixture.publish(b2, id: "2", deltaSources: 0)  // a build folder has no deltas to compare (DeltaSyncTests)
        let fromOrigin = try CLI.run([
            "diff", fixture.fileRemote + "#1", fixture.fileRemote, "--root", fixture.rootMetadata, "--json"
        ])
        #expect(fromOrigin.status == 0, "\(fromOrigin.stderr)")
        let fromInstall = try CLI.run(["diff", install.root, b2, "--json"])
        #expect(fromInstall.status == 0, "\(fromInstall.stderr)")
        let a = try lastJSON(fromOrigin.stdout), b = try lastJSON(fromInstall.stdout)
        #expect(
            (a["total"] as? [String: Any])?["downloadBytes"] as? Int == (b["total"] as? [String: Any])?["downloadBytes"]
                as? Int)
        #expect((a["new"] as? String)?.hasPrefix("2 (") == true)
        let unverified = try CLI.run(["diff", fixture.fileRemote + "#1", fixture.fileRemote])
        #expect(unverified.status == 64)
        #expect(unverified.stderr.contains("--root"))
    }

    @Test("--html writes one self-contained page whose charts headless Chromium draws")
    func html() throws {
        let fixture = try Fixture()
        let old = try fixture.sampleBuild(1, scale: 0.005), new = try fixture.sampleBuild(2, scale: 0.005)
        let page = fixture.directory + "/patch.html", shot = fixture.directory + "/patch.png"
        #expect(try CLI.run(["diff", old, new, "--html", page]).status == 0)
        let html = try String(contentsOfFile: page, encoding: .utf8)
        #expect(!html.contains("src=\"http") && !html.contains("href=\"http"), "no network resources")
        #expect(html.contains("<svg id=\"bundles\"") && html.contains("<table id=\"files\""))
        let chromium = Process()
        chromium.executableURL = URL(fileURLWithPath: "/usr/bin/chromium")
        chromium.arguments = [
            "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--window-size=1200,900",
            "--screenshot=\(shot)", "file://\(page)"
        ]
        chromium.standardError = FileHandle(forWritingAtPath: "/dev/null")
        chromium.standardOutput = FileHandle(forWritingAtPath: "/dev/null")
        try chromium.run()
        chromium.waitUntilExit()
        #expect(chromium.terminationStatus == 0)
        // Count the chart's bar colour (#2563eb) in the screenshot, with a small PNG decoder (zlib + unfilter).
        let (status, output) = try python(
            #"""
            import struct, sys, zlib
            data = open(sys.argv[1], 'rb').read()
            assert data[:8] == b'\x89PNG\r\n\x1a\n'
            pos, idat, w = 8, b'', 0
            while pos < len(data):
                n, kind = struct.unpack('>I4s', data[pos:pos + 8]); body = data[pos + 8:pos + 8 + n]
                if kind == b'IHDR': w, h, depth, ctype = struct.unpack('>IIBB', body[:10])
                if kind == b'IDAT': idat += body
                pos += 12 + n
            bpp = {2: 3, 6: 4}[ctype]; raw = zlib.decompress(idat); stride = w * bpp
            prev, rows, i = bytearray(stride), [], 0
            for _ in range(h):
                f, line = raw[i], bytearray(raw[i + 1:i + 1 + stride]); i += 1 + stride
                for x in range(stride):
                    a = line[x - bpp] if x >= bpp else 0; b = prev[x]; c = prev[x - bpp] if x >= bpp else 0
                    if f == 1: line[x] = (line[x] + a) & 255
                    elif f == 2: line[x] = (line[x] + b) & 255
                    elif f == 3: line[x] = (line[x] + (a + b) // 2) & 255
                    elif f == 4:
                        p = a + b - c; pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                        line[x] = (line[x] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
                rows.append(line); prev = line
            blue = sum(1 for r in rows for x in range(0, stride, bpp) if abs(r[x] - 37) < 8 and abs(r[x + 1] - 99) < 8 and abs(r[x + 2] - 235) < 8)
            print(blue)
            """#, [shot])
        #expect(status == 0, "\(output)")
        let bluePixels = Int(output.trimmingCharacters(in: .whitespacesAndNewlines)) ?? 0
        #expect(bluePixels > 2000, "the bar charts should be drawn (found \(bluePixels) bar pixels)")
        let attachmentDir = ProcessInfo.processInfo.environment["PATCHSYNC_SCREENSHOTS"]
        if let attachmentDir { try? FileManager.default.copyItem(atPath: shot, toPath: attachmentDir + "/diff.png") }
    }
}
