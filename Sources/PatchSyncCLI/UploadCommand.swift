import ArgumentParser
import Foundation
import PatchSync

struct Upload: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Upload an origin folder to an S3-compatible bucket: only what it lacks, timestamp.json last.",
        discussion: """
            What the bucket has is read from its timestamp.json (one request), not by listing its keys. \
            Objects and manifests go first, then root, targets and snapshot versions, then root.json and \
            timestamp.json, so players never see metadata that names a missing file. Content-addressed and \
            versioned files get Cache-Control "public, max-age=31536000, immutable"; timestamp.json and \
            root.json a short max-age (--metadata-max-age). A stopped upload continues where it stopped. \
            A bucket that lost files behind upload's back (a lifecycle rule, a delete by hand) still looks \
            up to date: --verify lists its keys (one request per 1,000; needs s3:ListBucket) and sends \
            again, in the same order, every file it lacks or holds with another size. --force sends every \
            file again.

            Credentials: AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (and AWS_SESSION_TOKEN), or the \
            AWS_PROFILE (default) profile of ~/.aws/credentials. Players read the bucket without \
            credentials: give it a public-read policy, or put a CDN in front.

            Examples:
              patchsync upload out/ s3://game-cdn/forest --endpoint https://ACCOUNT.r2.cloudflarestorage.com
              patchsync upload out/ s3://game-cdn/forest --endpoint https://ACCOUNT.r2.cloudflarestorage.com --verify
            """)

    @Argument(help: "The origin folder (what publish wrote).") var origin: String
    @Argument(help: "The destination, s3://BUCKET/PREFIX.") var destination: String
    @OptionGroup var originWait: OriginWait
    @Option(help: "Seconds a CDN may serve an old timestamp.json or root.json.") var metadataMaxAge: Int = 60
    @Flag(help: "List the bucket and send again every file it lacks or holds with another size.") var verify = false
    @Flag(
        help:
            "Send every file again, even over a bucket whose metadata is newer than the origin's, or not from this origin."
    )
    var force = false
    @Flag(help: "Print progress events and the result as JSON.") var json = false

    func run() async throws {
        try originWait.apply()
        var options = Uploader.Options()
        options.connections = max(1, originWait.store.connections)
        options.metadataMaxAge = max(0, metadataMaxAge)
        options.force = force
        options.verify = verify
        let uploader = Uploader(origin: origin, bucket: try originWait.store.bucket(destination), options: options)
        let reporter = ProgressReporter(mode: .choose(json: json, quiet: false), verb: "uploading")
        let report = try uploader.run {
            reporter.handle(
                .transfer(
                    TransferStatus(done: $0.bytes, total: $0.totalBytes, filesDone: $0.files, filesTotal: $0.totalFiles)
                ))
        }
        reporter.finish()
        Output(json: json).result(report, human: Self.human(report))
    }

    /// What an upload did, for people.
    static func human(_ report: Uploader.Report) -> String {
        if report.alreadyCurrent {
            return "\(report.destination) is up to date (its timestamp.json is the origin's"
                + (report.verified
                    ? ", and its listing has every file with the origin's size); nothing sent"
                    : "); nothing sent (--verify checks the bucket's listing for lost files)")
        }
        var lines = [
            "uploaded \(report.filesUploaded) files (\(ByteCount.format(report.bytesUploaded))) to \(report.destination) in "
                + "\(report.requests) requests; \(report.filesSkipped) files were there already"
        ]
        if !report.resent.isEmpty {
            let count = report.resent.count
            let shown = report.resent.prefix(10).joined(separator: ", ") + (count > 10 ? " and \(count - 10) more" : "")
            lines.append(
                "re-sent \(count) file\(count == 1 ? "" : "s") the bucket was taken to have"
                    + (report.verified ? " but lacked or held with another size: " : ": ") + shown)
        }
        lines.append("players: patchsync init --remote \(report.destination) …")
        return lines.joined(separator: "\n")
    }
}
