import Foundation
import Testing

@testable import PatchSync

@Suite("A bucket's listing read as S3 writes it", .tags(.small))
struct S3ListingTests {
    /// `repo prune` counts a grace from when the bucket got each metadata version: the listing must carry
    /// `LastModified`, with or without fractional seconds, and an object listed without one has none.
    @Test("each listed object carries when the store last wrote it; a key, size and ETag as written")
    func lastModified() throws {
        let page = """
            <?xml version="1.0" encoding="UTF-8"?>
            <ListBucketResult><IsTruncated>false</IsTruncated>
            <Contents><Key>repo/metadata/2.targets.json</Key><LastModified>2026-11-29T10:00:05.250Z</LastModified>\
            <ETag>&quot;abc&quot;</ETag><Size>602</Size></Contents>
            <Contents><Key>repo/metadata/3.targets.json</Key><LastModified>2027-01-02T03:04:05Z</LastModified>\
            <Size>7</Size></Contents>
            <Contents><Key>repo/a&amp;b</Key><Size>1</Size></Contents>
            </ListBucketResult>
            """
        let listing = try S3Listing(parsing: Data(page.utf8), from: "http://store/game")
        try #require(listing.objects.count == 3)
        #expect(listing.objects[0].key == "repo/metadata/2.targets.json" && listing.objects[0].size == 602)
        #expect(listing.objects[0].etag == "abc")
        // 2026-11-29T10:00:05.250Z and 2027-01-02T03:04:05Z, as Unix times.
        let written = [Date(timeIntervalSince1970: 1_795_946_405.25), Date(timeIntervalSince1970: 1_798_859_045)]
        #expect(listing.objects[0].modified.flatMap(S3Listing.date) == written[0])
        #expect(listing.objects[1].modified.flatMap(S3Listing.date) == written[1])
        #expect(listing.objects[2].key == "repo/a&b" && listing.objects[2].modified == nil)
        #expect(listing.next == nil)
    }
}
