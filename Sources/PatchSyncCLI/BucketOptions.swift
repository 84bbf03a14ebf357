import ArgumentParser
import PatchSync

/// Where an S3 bucket is and how to reach it: shared by `upload` and `repo prune --bucket`.
struct BucketOptions: ParsableArguments {
    @Option(help: "The endpoint of an S3-compatible store (R2, GCS's XML API, MinIO…); default AWS S3.") var endpoint:
        String?
    @Option(help: "The region requests are signed for (default: AWS_REGION, ~/.aws/config, or us-east-1).") var region:
        String?
    @Option(help: "A private CA for the endpoint's TLS certificate.") var caFile: String?
    @Option(help: "Requests in flight at once.") var connections: Int = 8

    /// The bucket of `url` (s3://BUCKET/PREFIX), with credentials from the AWS environment variables or
    /// ~/.aws/credentials.
    func bucket(_ url: String) throws(PatchSyncError) -> S3Bucket {
        var bucket = try S3Bucket(
            url: url, endpoint: endpoint, region: region ?? S3Bucket.Credentials.region(),
            credentials: try S3Bucket.Credentials.fromEnvironment())
        bucket.caFile = caFile
        return bucket
    }
}
