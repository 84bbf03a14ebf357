import Foundation

extension Uploader {
    /// What a bucket serves players, next to the origin folder it is uploaded from (`repo status
    /// --bucket`, `repo check --bucket`).
    public struct BucketState: Codable, Sendable {
        public var destination: String
        /// The timestamp version the bucket serves (nil: none, an empty bucket).
        public var servedTimestamp: Int?
        /// The snapshot and targets versions it serves, when the origin folder holds that snapshot.
        public var servedSnapshot: Int?
        public var servedTargets: Int?
        public var originTimestamp: Int
        /// The bucket's timestamp.json is the origin's.
        public var current: Bool
        /// Signed files players of what the bucket serves may ask for that the bucket lacks, or holds
        /// with another size or content (its ETag) than the origin's: `upload --verify` sends them again.
        public var missing: [String]
        public var requests: Int
        /// The command that sends what the bucket lacks, ready to paste.
        public var repair: String
    }

    /// Reads the bucket's timestamp.json and lists its keys: see ``BucketState``. Needs s3:ListBucket.
    public func inspect() throws(PatchSyncError) -> BucketState {
        let repo = try Repository.load(origin: origin)
        let connection = try S3Connection(bucket)
        let local = try FileSystem.read(OriginLayout(root: origin).timestampFile, limit: 1 << 20)
        let remote = try connection.get(OriginLayout.timestamp, limit: 1 << 20)
        let ours: Signed<TimestampMetadata> = try Signed(parsing: local, name: OriginLayout.timestampName)
        var state = BucketState(
            destination: bucket.publicURL, originTimestamp: ours.signed.version, current: remote == local, missing: [],
            requests: 1,
            repair: "patchsync upload \(origin) \(bucket.commandArguments) --verify")
        if let remote, let theirs = try? Signed<TimestampMetadata>(parsing: remote, name: OriginLayout.timestampName) {
            state.servedTimestamp = theirs.signed.version
        }
        guard let remote else { return state }
        var contents = BuildContents.Memo()
        let files = try BuildContents.files(of: origin)
        let needed = try neededFiles(repo, files: Set(files.map(\.path)), contents: &contents)
        var asked = Set(files.filter { OriginLayout.isMetadata($0.path) || needed.contains($0.path) }.map(\.path))
        if let served = served(remoteTimestamp: remote) {
            state.servedSnapshot = served.snapshot
            state.servedTargets = served.targets.version
        }
        if !state.current {
            // Behind the origin: what the bucket's own metadata names, not what the next upload brings.
            asked.formIntersection(present(remoteTimestamp: remote, contents: &contents))
            asked.subtract(Self.mutable)
        }
        let listed = try connection.list(requests: &state.requests)
        let layout = OriginLayout(root: origin)
        let md5 = ListedObject.etagsAreMD5(listed, files: files, root: layout)
        state.missing = files.filter { file in
            asked.contains(file.path)
                && !(listed[file.path]?.holds(layout.path(file.path), bytes: file.bytes, etagIsMD5: md5) ?? false)
        }.map(\.path).sorted()
        return state
    }
}
