import Foundation

/// `repo check --cdn URL`: what players behind a CDN (or a lancache) in front of an origin folder would
/// suffer. The folder's own object names and sizes are checked first (names a CDN caches by default,
/// no file over ``ObjectNaming/segmentBytes``); then the front is asked for a range of a few of the
/// largest objects twice, and for `metadata/timestamp.json` twice, and each answer is compared with
/// the folder: a range answered with the whole file, no sign of a cache hit on the second request
/// (`CF-Cache-Status`, `X-Cache`, `Age`), bytes that differ, and metadata older than the folder's
/// beyond its max-age, or sent with a longer `max-age` than players are promised.
public enum CDNCheck {
    /// How many objects are asked for.
    static let samples = 3
    /// The bytes asked of each object.
    static let rangeBytes: Int64 = 64 << 10

    /// Checks the front `cdn` of origin folder `origin`; `metadataMaxAge` is the longest a CDN may serve
    /// an old `timestamp.json` (what `upload --metadata-max-age` sets).
    public static func run(
        origin: String, cdn: String, metadataMaxAge: Int = 60, now: Date = Date()
    ) async throws(PatchSyncError) -> [Repository.ListingProblem] {
        let base = cdn.hasSuffix("/") ? String(cdn.dropLast()) : cdn
        let layout = OriginLayout(root: origin)
        var found: [Repository.ListingProblem] = []
        func problem(_ kind: Repository.ListingProblem.Kind, _ text: String, fix: String) {
            found.append(Repository.ListingProblem(kind: kind, channel: "", buildId: "", problem: text, fix: fix))
        }
        let objects = try BuildContents.files(of: origin).filter { OriginLayout.isObject($0.path) }
        found += namingProblems(objects)
        let client: HTTPClient
        do { client = try HTTPClient() } catch { throw PatchSyncError.wrap(error) }
        // The largest objects: those a CDN is likeliest to refuse, and where a miss costs most.
        let sampled = objects.sorted { ($0.bytes, $0.path) > ($1.bytes, $1.path) }.prefix(samples)
        var misses: [String] = [], ignored: [String] = []
        for object in sampled where object.bytes > 0 {
            let length = min(object.bytes, rangeBytes)
            let expected = try firstBytes(of: layout.path(object.path), length: length)
            var answers: [(TransferResponse, Data)] = []
            for _ in 0..<2 {
                let sink = DataSink()
                let url = base + "/" + object.path
                switch await client.fetch(
                    TransferRequest(url: url, range: 0...(length - 1), maxBytes: length), into: sink)
                {
                case .success(let response): answers.append((response, sink.data))
                case .failure(let failure):
                    problem(
                        .cdnUnreachable, "\(url): \(failure)",
                        fix: "check that \(base) serves \(origin) (the same paths under it)")
                    return found
                }
            }
            if answers.contains(where: { $0.1 != expected }) {
                problem(
                    .cdnWrongBytes, "\(base)/\(object.path) does not send the bytes of \(layout.path(object.path))",
                    fix: "point the CDN at this origin, or upload the folder again (`patchsync upload … --verify`)")
            }
            if answers.contains(where: { $0.0.status == 200 }) { ignored.append(object.path) }
            if !isHit(answers[1].0.headers) { misses.append(object.path) }
        }
        found += servingProblems(base: base, ignored: ignored, misses: misses)
        try await checkMetadata(
            base: base, layout: layout, client: client, maxAge: metadataMaxAge, now: now, problem: problem)
        return found
    }

    private static func listing(_ kind: Repository.ListingProblem.Kind, _ text: String, fix: String)
        -> Repository.ListingProblem
    {
        Repository.ListingProblem(kind: kind, channel: "", buildId: "", problem: text, fix: fix)
    }

    /// What the objects' names and sizes cost behind a CDN: names it does not cache by default, objects
    /// over what common plans cache.
    private static func namingProblems(_ objects: [(path: String, bytes: Int64)]) -> [Repository.ListingProblem] {
        var found: [Repository.ListingProblem] = []
        func problem(_ kind: Repository.ListingProblem.Kind, _ text: String, fix: String) {
            found.append(listing(kind, text, fix: fix))
        }
        let plain = objects.filter { !$0.path.hasSuffix("." + ObjectNaming.fileExtension) }
        if let first = plain.first {
            problem(
                .uncacheableName,
                "\(plain.count) objects have no extension a CDN caches by default (\(first.path)): they were published "
                    + "by an older PatchSync, and every player's request for them reaches the origin",
                fix:
                    "publish the builds that need them again with this PatchSync and `patchsync repo prune` the old ones, "
                    + "or add a cache rule for objects/*")
        }
        let large = objects.filter { $0.bytes > ObjectNaming.segmentBytes }
        if let first = large.max(by: { $0.bytes < $1.bytes }) {
            problem(
                .oversizedObject,
                "\(large.count) objects are over \(ByteCount.format(ObjectNaming.segmentBytes)) (\(first.path), "
                    + "\(ByteCount.format(first.bytes))): common CDN plans do not cache files over 512 MB",
                fix: "publish those builds again with this PatchSync, which cuts objects in segments")
        }
        return found
    }

    /// What the CDN's answers cost: ranges answered with whole objects, objects never served from its cache.
    private static func servingProblems(base: String, ignored: [String], misses: [String])
        -> [Repository.ListingProblem]
    {
        var found: [Repository.ListingProblem] = []
        func problem(_ kind: Repository.ListingProblem.Kind, _ text: String, fix: String) {
            found.append(listing(kind, text, fix: fix))
        }
        if let first = ignored.first {
            problem(
                .rangeIgnored,
                "\(base) answered a range of \(first) (and \(ignored.count - 1) more) with the whole file: "
                    + "players pay whole objects for a few chunks",
                fix:
                    "turn on range requests for objects/* (most CDNs do by default; in nginx, `slice` with `proxy_cache`)"
            )
        }
        if let first = misses.first {
            problem(
                .notCached,
                "\(base) shows no cache hit on the second request for \(first) (and \(misses.count - 1) more): no "
                    + "CF-Cache-Status, X-Cache or Age header says it came from the cache, so every player's request reaches the origin",
                fix: "cache objects/* and targets/* (immutable: `Cache-Control: public, max-age=31536000, immutable`); "
                    + "the README gives the rules for Cloudflare, CloudFront, Fastly and nginx")
        }
        return found
    }

    /// The first `length` bytes of the file at `path`.
    private static func firstBytes(of path: String, length: Int64) throws(PatchSyncError) -> Data {
        do {
            let file = try FileDescriptor(path: path, flags: O_RDONLY)
            var bytes = [UInt8](repeating: 0, count: Int(length))
            let read = try file.read(into: &bytes)
            return Data(bytes.prefix(read))
        } catch { throw PatchSyncError.wrap(error) }
    }

    /// Whether a response's headers say it came from a cache.
    static func isHit(_ headers: [String: String]) -> Bool {
        if let status = headers["cf-cache-status"]?.uppercased(),
            ["HIT", "REVALIDATED", "UPDATING", "STALE"].contains(status)
        {
            return true
        }
        if let cache = headers["x-cache"]?.lowercased(), cache.contains("hit") { return true }
        if let age = headers["age"].flatMap({ Int($0) }), age > 0 { return true }
        return false
    }

    /// `timestamp.json` from the front against the folder's: older beyond `maxAge`, or sent with a
    /// longer max-age than that.
    private static func checkMetadata(
        base: String, layout: OriginLayout, client: HTTPClient, maxAge: Int, now: Date,
        problem: (Repository.ListingProblem.Kind, String, String) -> Void
    ) async throws(PatchSyncError) {
        let url = base + "/" + OriginLayout.timestamp
        let local: Data, written: Date
        do {
            local = try FileSystem.read(layout.timestampFile, limit: Int(TrustClient.maxRootBytes))
            guard let st = try FileSystem.status(layout.timestampFile) else {
                throw Errno(ENOENT, "reading", layout.timestampFile)
            }
            written = Date(timeIntervalSince1970: TimeInterval(st.st_mtim.tv_sec))
        } catch { throw PatchSyncError.wrap(error) }
        for attempt in 0..<2 {
            let sink = DataSink()
            let response: TransferResponse
            switch await client.fetch(TransferRequest(url: url, maxBytes: TrustClient.maxRootBytes), into: sink) {
            case .success(let answer): response = answer
            case .failure(let failure):
                problem(.cdnUnreachable, "\(url): \(failure)", "check that \(base) serves the origin's metadata/")
                return
            }
            if let control = response.headers["cache-control"], let age = maxAgeSeconds(control), age > maxAge,
                attempt == 0
            {
                problem(
                    .metadataCachedTooLong,
                    "\(url) is sent with `Cache-Control: \(control)`: players may see a new build \(age) s late, "
                        + "more than the \(maxAge) s promised",
                    "serve metadata/timestamp.json and metadata/root.json with max-age=\(maxAge) or less (`patchsync upload` sets it)"
                )
            }
            let served = version(of: sink.data), current = version(of: local)
            let stale =
                sink.data != local && (served ?? 0) < (current ?? 0)
                && now.timeIntervalSince(written) > TimeInterval(maxAge)
            if stale {
                problem(
                    .metadataCachedTooLong,
                    "\(url) is timestamp version \(served.map(String.init) ?? "?") while the origin has had version "
                        + "\(current.map(String.init) ?? "?") for \(Int(now.timeIntervalSince(written))) s, more than its max-age of \(maxAge) s",
                    "cache metadata/timestamp.json no longer than its Cache-Control max-age (respect the origin's headers), "
                        + "or purge it after each publish")
                return
            }
        }
    }

    /// The `max-age` (or `s-maxage`, which shared caches obey) of a Cache-Control value.
    static func maxAgeSeconds(_ control: String) -> Int? {
        var found: Int?
        for part in control.split(separator: ",") {
            let pair = part.split(separator: "=", maxSplits: 1).map {
                $0.trimmingCharacters(in: .whitespaces).lowercased()
            }
            guard pair.count == 2, let value = Int(pair[1].trimmingCharacters(in: CharacterSet(charactersIn: "\"")))
            else { continue }
            if pair[0] == "s-maxage" { return value }
            if pair[0] == "max-age" { found = value }
        }
        return found
    }

    /// The signed version of timestamp metadata, nil when it does not parse.
    private static func version(of data: Data) -> Int? {
        guard let json = try? JSONSerialization.jsonObject(with: data) as? [String: Any],
            let signed = json["signed"] as? [String: Any]
        else { return nil }
        return signed["version"] as? Int
    }
}
