import ArgumentParser
import Foundation
import PatchSync

/// How a command reaches its origin: `--wait` for another command writing it (a CI job beside the cron
/// refresh) before giving up with exit 75, and for an origin given as `s3://BUCKET/PREFIX` the bucket's
/// endpoint, region and credentials, and the local cache folder the command works in.
struct OriginWait: ParsableArguments {
    @Option(help: "Wait this long for another command writing the origin (30s, 10m; default: none, exit 75 at once).")
    var wait: String?
    @Option(
        help: ArgumentHelp(
            "For an origin in a bucket (s3://BUCKET/PREFIX): the local folder that mirrors it (default: under $XDG_CACHE_HOME, else ~/.cache).",
            valueName: "folder")) var cache: String?
    @OptionGroup var store: BucketOptions

    func apply() throws(PatchSyncError) {
        guard let wait else { return }
        OriginLock.wait = try parseDuration(wait, allowZero: true)
    }

    /// Whether `origin` names a bucket rather than a folder.
    static func isBucket(_ origin: String) -> Bool { origin.hasPrefix("s3://") }

    /// Refuses `--bucket` beside an origin that is a bucket already (`sameAllowed`: unless it is that bucket).
    static func refuseBucket(_ bucket: String?, with origin: String, sameAllowed: Bool = false) throws(PatchSyncError) {
        guard let bucket, isBucket(origin), !(sameAllowed && bucket == origin) else { return }
        throw PatchSyncError(
            .usage, "--bucket \(bucket) with --origin \(origin): the origin is a bucket already",
            remedy: "give the bucket as --origin alone")
    }

    /// Runs `body` on the origin folder: `origin` itself, or for `s3://…` the cache folder brought up to
    /// the bucket's state, whose changes a writer then commits to the bucket (a line on standard error
    /// says what went each way).
    /// `deleting`, asked after `body`: the files (relative to the origin) the command removed, to delete
    /// from the bucket once it committed.
    func open<T>(
        _ origin: String, purpose: String, writes: Bool = true, creating: Bool = false, json: Bool = false,
        deleting: () -> [String] = { [] }, _ body: (String) async throws -> T
    ) async throws -> T {
        try apply()
        guard Self.isBucket(origin) else { return try await body(origin) }
        var access = BucketOrigin(bucket: try store.bucket(origin), cache: cache)
        access.connections = max(1, store.connections)
        access.wait = OriginLock.wait
        let session = try access.open(purpose: purpose, writes: writes, creating: creating)
        defer { session.close() }
        let result = try await body(session.folder)
        let report = try session.commit(deleting: Set(deleting()))
        if !json, report.downloaded + report.uploaded + report.deleted > 0 {
            FileHandle.standardError.write(
                Data(
                    ("\(origin): downloaded \(report.downloaded) file(s), \(ByteCount.format(report.bytesDownloaded)); "
                        + "sent \(report.uploaded), \(ByteCount.format(report.bytesUploaded)); deleted \(report.deleted)"
                        + " (cache \(session.folder))\n").utf8))
        }
        return result
    }
}
