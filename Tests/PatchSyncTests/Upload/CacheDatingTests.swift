import Foundation
import PatchSyncTestSupport
import Testing

@testable import PatchSync

/// A bucket's cache dates its metadata versions as the bucket got them, for `repo prune`'s grace, and
/// never earlier than the truth can be: a date the store gives that would shorten a grace is not taken.
@Suite("A bucket's cache dated as the bucket got its metadata", .tags(.small))
struct CacheDatingTests {
    @Test(
        "versions take the listing's LastModified; a date before the first root, or before the role's previous version, is not taken (never earlier); timestamp.json and root.json keep their own"
    )
    func dates() throws {
        let fixture = try Fixture()
        let cache = fixture.directory + "/cache"
        let names = [
            "1.root.json", "2.targets.json", "3.targets.json", "4.targets.json", "5.targets.json", "timestamp.json"
        ]
        try FileManager.default.createDirectory(atPath: cache + "/metadata", withIntermediateDirectories: true)
        for name in names { try Data("{}".utf8).write(to: URL(fileURLWithPath: cache + "/metadata/" + name)) }
        // Each file's time as downloaded: what a date not taken leaves.
        var downloaded: [String: Date] = [:]
        for name in names { downloaded[name] = try modified(cache + "/metadata/" + name) }
        let bucket = try S3Bucket(
            url: "s3://game/repo", endpoint: "http://127.0.0.1:9", region: "us-east-1",
            credentials: .init(accessKeyId: "a", secretAccessKey: "b"))
        let listed: [String: ListedObject] = [
            "metadata/1.root.json": ListedObject(size: 2, modified: "2026-01-01T00:00:00.000Z"),
            "metadata/2.targets.json": ListedObject(size: 2, modified: "2026-03-01T00:00:00.000Z"),
            // Earlier than version 2: taken as version 2's date, never earlier.
            "metadata/3.targets.json": ListedObject(size: 2, modified: "2026-02-01T00:00:00.000Z"),
            // The zero time of a broken store: before the first root, not taken.
            "metadata/4.targets.json": ListedObject(size: 2, modified: "0001-01-01T00:00:00Z"),
            "metadata/5.targets.json": ListedObject(size: 2, modified: "not a date"),
            "metadata/timestamp.json": ListedObject(size: 2, modified: "2026-01-02T00:00:00Z")
        ]
        BucketOrigin(bucket: bucket, cache: cache).dateMetadata(listed)
        let march = try #require(S3Listing.date("2026-03-01T00:00:00Z"))
        #expect(try modified(cache + "/metadata/2.targets.json") == march)
        #expect(try modified(cache + "/metadata/3.targets.json") == march)
        for name in ["4.targets.json", "5.targets.json", "timestamp.json"] {
            #expect(try modified(cache + "/metadata/" + name) == downloaded[name], "\(name) keeps its own time")
        }
        #expect(try modified(cache + "/metadata/1.root.json") == S3Listing.date("2026-01-01T00:00:00Z"))
    }

    private func modified(_ path: String) throws -> Date {
        try #require(try FileManager.default.attributesOfItem(atPath: path)[.modificationDate] as? Date)
    }
}
