import Foundation
import Testing

@testable import PatchSync

/// An upload signs its requests with AWS SigV4 or sends none: a libcurl without CURLOPT_AWS_SIGV4
/// (before 7.75.0) takes the access key and secret as HTTP Basic authorization of every request.
@Suite("S3 connection: AWS SigV4 or nothing sent", .tags(.small))
struct S3ConnectionTests {
    static let releases: [(UInt32, String, Bool)] = [
        (0x07_44_00, "7.68.0", false),
        (0x07_4A_00, "7.74.0", false),
        (0x07_4B_00, "7.75.0", true),
        (0x07_58_01, "7.88.1", true),
        (0x08_05_00, "8.5.0", true)
    ]

    @Test(
        "an upload refuses to start on a libcurl without AWS SigV4 (older than 7.75.0): unavailable (69), naming the release it needs, instead of sending the secret as Basic authorization",
        arguments: releases)
    func sigV4Required(number: UInt32, version: String, signs: Bool) {
        do throws(PatchSyncError) {
            try S3Connection.requireSigV4(libcurl: number, version: version)
            #expect(signs, "libcurl \(version) was let through")
        } catch {
            #expect(!signs, "libcurl \(version) was refused: \(error)")
            #expect(error.code == .originUnavailable)
            #expect(
                error.message.contains("libcurl \(version) lacks CURLOPT_AWS_SIGV4 (libcurl 7.75.0 or later"),
                "\(error.message)")
            #expect(error.remedy?.contains("libcurl 7.75.0 or later") == true, "\(error.remedy ?? "")")
        }
    }

    @Test("the libcurl loaded here signs: a connection opens and reports its release")
    func loadedSigns() throws {
        let bucket = try S3Bucket(
            url: "s3://bucket/prefix", endpoint: "http://127.0.0.1:1", region: "us-east-1",
            credentials: .init(accessKeyId: "AKIDEXAMPLE", secretAccessKey: "secret"))
        _ = try S3Connection(bucket)
        #expect(LoadedCurl.release.number >= S3Connection.sigV4Release, "libcurl \(LoadedCurl.version)")
    }
}
