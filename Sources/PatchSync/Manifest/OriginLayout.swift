import Foundation

/// Every name on an origin, and the parse of those names: the one place that spells them. The static
/// names are relative to the origin's root, as mirrors serve them and a bucket keys them; a value joins
/// them to an origin folder on disk.
///
/// ```
/// <origin>/
///   metadata/root.json, metadata/<N>.root.json     TUF root, every version kept (key rotation)
///   metadata/timestamp.json                        re-signed in place, as root.json is copied
///   metadata/<N>.snapshot.json                     consistent snapshots: nothing else is overwritten
///   metadata/<N>.targets.json                      the channels' builds as targets
///   metadata/<N>.releases.json                     released content keys (once a preload is published)
///   targets/<folder>/<sha256>.<name>               target files: manifests/<channel>/<build>.json.gz,
///                                                  releases/<channel>/<build>.key, preload plans
///   objects/<ab>/<sha256>.bin                      objects, packs, delta packs, manifest deltas, sealed objects
///   objects/<ab>/<sha256>.<k>.bin                  segment k of an object over 256 MiB (``ObjectNaming``)
///   objects/.incoming/, objects/.incoming/<0-15>/  a publish's files before they are renamed into place
///   .patchsync-origin.lock                         the writers' lock (``OriginLock``)
///   .patchsync-upload/<SHA-256 of a destination>   the journal of an upload that stopped (``Uploader``)
/// ```
///
/// Names starting with a dot are never served nor uploaded. A trusted metadata folder (an install's
/// `.patchsync/metadata`) keeps the same file names as `metadata/`, without versions.
public struct OriginLayout: Sendable, Equatable {
    /// The origin folder, or a folder laid out like one (a preload's plain objects before they are sealed).
    public let root: String

    public init(root: String) { self.root = root }

    /// A name of this layout (relative to the origin) in the origin folder.
    public func path(_ relative: String) -> String { root + "/" + relative }
}

// MARK: metadata

extension OriginLayout {
    static let metadataFolderName = "metadata"

    /// The TUF file names of the top-level roles (and the keys under which snapshot and timestamp metadata
    /// pin them).
    static let rootName = "root.json"
    static let timestampName = "timestamp.json"
    static let snapshotName = "snapshot.json"
    static let targetsName = "targets.json"

    /// `<role>.json` with the role name percent-encoded, so no name can leave the metadata folder.
    static func fileName(role: String) -> String { percentEncoded(role) + ".json" }

    /// `<version>.<role>.json`: a version of a role's metadata under consistent snapshots.
    static func fileName(role: String, version: Int) -> String { "\(version).\(fileName(role: role))" }

    /// The key under which snapshot metadata pins a role's metadata: `<role>.json` with the plain role name.
    static func metaKey(role: String) -> String { role + ".json" }

    /// The name a role's metadata is fetched under: versioned with consistent snapshots.
    static func remoteName(role: String, version: Int, consistent: Bool) -> String {
        consistent ? fileName(role: role, version: version) : fileName(role: role)
    }

    /// Every byte but ASCII letters, digits and `-_.~` percent-encoded (Python's `quote(name, safe="")`,
    /// which the reference client uses): the result never contains a `/`.
    static func percentEncoded(_ name: String) -> String {
        let allowed = CharacterSet(charactersIn: "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.~")
        return name.addingPercentEncoding(withAllowedCharacters: allowed) ?? "invalid"
    }

    /// `metadata/<name>`.
    static func metadata(_ name: String) -> String { metadataFolderName + "/" + name }

    /// `metadata/<version>.<role>.json`.
    static func metadata(role: String, version: Int) -> String { metadata(fileName(role: role, version: version)) }

    /// `metadata/root.json`: the newest root, the copy a game ships and `patchsync init --root` trusts.
    public static let rootMetadata = metadata(rootName)
    /// `metadata/timestamp.json`: the one file players poll.
    static let timestamp = metadata(timestampName)

    var metadataFolder: String { path(Self.metadataFolderName) }
    public var rootMetadataFile: String { path(Self.rootMetadata) }
    var timestampFile: String { path(Self.timestamp) }

    /// Whether `path` is in `metadata/`.
    static func isMetadata(_ path: String) -> Bool { path.hasPrefix(metadataFolderName + "/") }

    /// Whether `path` names metadata of `role`, of any version (`….<role>.json`).
    static func isMetadata(_ path: String, role: String) -> Bool { path.hasSuffix("." + fileName(role: role)) }

    /// Whether `path` is a version of `role`'s metadata (`metadata/<N>.<role>.json`), which is never
    /// overwritten.
    static func isVersionedMetadata(_ path: String, role: String) -> Bool {
        isMetadata(path) && isMetadata(path, role: role)
            && path.dropFirst(metadataFolderName.count + 1).first?.isNumber == true
    }

    /// Whether `path` is a version of the root (`metadata/<N>.root.json`): every one is kept.
    static func isRootVersion(_ path: String) -> Bool { isVersionedMetadata(path, role: "root") }

    /// The version a file name in `metadata/` gives `role` (`<N>.<role>.json`); nil for another name.
    static func version(ofMetadataName name: String, role: String) -> Int? {
        let suffix = "." + fileName(role: role)
        return name.hasSuffix(suffix) ? Int(name.dropLast(suffix.count)) : nil
    }
}

// MARK: targets

extension OriginLayout {
    static let targetsFolderName = "targets"

    /// The target path of a build's manifest in TUF targets metadata.
    static func manifestTarget(channel: Channel, buildId: BuildID) -> String {
        "manifests/\(channel)/\(buildId).json.gz"
    }

    /// The target path of a preload build's released content key.
    static func keyTarget(channel: String, build: String) -> String { "releases/\(channel)/\(build).key" }

    /// TUF's consistent-snapshot name of a target file: the hash goes before its base name
    /// (`manifests/live/1.0.json.gz` → `manifests/live/<sha256>.1.0.json.gz`).
    static func consistentName(_ target: String, sha256: String) -> String {
        guard let slash = target.lastIndex(of: "/") else { return "\(sha256).\(target)" }
        return "\(target[...slash])\(sha256).\(target[target.index(after: slash)...])"
    }

    /// `targets/<consistent name>`: where target `target` with SHA-256 `sha256` is stored.
    static func targetFile(_ target: String, sha256: String) -> String {
        targetsFolderName + "/" + consistentName(target, sha256: sha256)
    }

    var targetsFolder: String { path(Self.targetsFolderName) }

    /// Whether `path` is a target file (in `targets/`).
    static func isTarget(_ path: String) -> Bool { path.hasPrefix(targetsFolderName + "/") }
}

// MARK: objects

extension OriginLayout {
    public static let objectsFolderName = "objects"

    /// `objects/<first two hex digits>/<sha256>.bin`: a content-addressed object as publish writes it
    /// now (its first segment; see ``ObjectNaming``).
    public static func object(_ id: SHA256Digest) -> String { ObjectNaming.current.path(id) }

    /// ``object(_:)`` of an object named by its hex digits (as manifest deltas name theirs).
    static func object(hex: String) -> String { ObjectNaming.current.path(hex: hex, segment: 0) }

    var objectsFolder: String { path(Self.objectsFolderName) }
    func objectFile(_ id: SHA256Digest) -> String { path(Self.object(id)) }

    /// Whether `path` is an object (in `objects/`).
    static func isObject(_ path: String) -> Bool { path.hasPrefix(objectsFolderName + "/") }

    /// Whether origin file `path` is needed when `needed` lists the files builds name: a later segment of
    /// an object (`<sha256>.<k>.bin`) is needed with its first (a preload plan names shared objects by
    /// their first segment alone).
    static func isNeeded(_ path: String, in needed: Set<String>) -> Bool {
        if needed.contains(path) { return true }
        guard isObject(path), let slash = path.lastIndex(of: "/"),
            let (sha, segment) = ObjectNaming.parse(String(path[path.index(after: slash)...])), segment > 0
        else { return false }
        return needed.contains(ObjectNaming.current.path(sha))
    }

    /// Whether `name`, in `objects/`, is a folder of objects (`<ab>`).
    static func isObjectFolder(_ name: String) -> Bool { name.count == 2 }

    /// `objects/.incoming`: where publishes write files before renaming them into place.
    static let incoming = objectsFolderName + "/.incoming"

    /// The subfolders of `objects/.incoming` that objects and packs are written in, spread so that
    /// threads creating files do not all wait for one folder's lock.
    static let incomingSpread = 16

    var incomingFolder: String { path(Self.incoming) }
    func incomingSubfolder(_ index: Int) -> String { incomingFolder + "/\(index)" }

    /// A new object being written by this process (``ObjectWriter``), in the subfolder `random` picks.
    func incomingObject(_ random: UInt64) -> String {
        incomingSubfolder(Int(random % UInt64(Self.incomingSpread))) + "/\(getpid())-\(random)"
    }

    /// A new pack of small files being written by this process (``PackWriter``).
    func incomingPack(_ random: UInt64) -> String {
        incomingSubfolder(Int(random % UInt64(Self.incomingSpread))) + "/pack-\(getpid())-\(random)"
    }

    /// A sealed object being written by this process (``Sealer``), in `objects/.incoming` itself.
    func incomingSealed(_ random: UInt64) -> String { incomingFolder + "/\(getpid())-\(random).sealed" }

    /// A delta pack being written by this process, in `objects/.incoming` itself.
    func incomingDeltaPack(_ random: UInt64) -> String { incomingFolder + "/\(getpid())-\(random).pack" }
}

// MARK: the folder

extension OriginLayout {
    /// The folders a client reads, in the order they are listed.
    static let servedFolders = [objectsFolderName, targetsFolderName, metadataFolderName]
    /// Where publish records the folder it wrote preload content keys to (one line, an absolute path), so
    /// that release and refresh find them wherever the online key is kept. Never served or uploaded.
    static let contentKeysRecord = ".content-keys"
    /// The highest sequence each channel ever listed (`{"live": 7}`), so that a build listed after a
    /// withdrawal never takes a sequence players have already seen. Never served or uploaded.
    static let sequencesRecord = ".sequences.json"

    /// Whether a name in a served folder is served: not hidden (`objects/.incoming`) and not an unfinished
    /// write (`NAME.tmp-PID`).
    static func isServed(name: String) -> Bool { !name.hasPrefix(".") && !name.contains(".tmp-") }

    /// The writers' lock file's name (``OriginLock``); it starts with a dot, so `upload` never copies it.
    public static let lockFileName = ".patchsync-origin.lock"
    var lockFile: String { path(Self.lockFileName) }

    /// The journals of uploads that stopped, one per destination.
    var uploadJournalFolder: String { path(".patchsync-upload") }
    /// The journal of an upload to the destination whose description has the SHA-256 `destinationHash`.
    func uploadJournal(_ destinationHash: String) -> String { uploadJournalFolder + "/" + destinationHash }

    /// The publisher's commands work on the origin folder publish writes: a URL given as one is refused
    /// with where it belongs (it would otherwise be taken for a folder named `http:`).
    public static func refuseURL(_ origin: String) throws(PatchSyncError) {
        guard let scheme = origin.range(of: "^[A-Za-z][A-Za-z0-9+.-]*://", options: .regularExpression) else { return }
        throw PatchSyncError(
            .usage,
            "--origin \(origin) is a URL (\(origin[scheme].dropLast(3))); the publisher's commands work on the origin folder "
                + "that publish writes, or on a bucket given as s3://BUCKET/PREFIX",
            remedy: "give that folder or bucket; players' `--remote` takes the URL")
    }
}

/// How a manifest's objects are named and cut, by its format. From format 6 every object name ends in
/// `.bin`, an extension CDNs cache by default, and no object file exceeds ``segmentBytes``: a file whose
/// stored bytes are larger spans segments, `<sha256>.bin`, `<sha256>.1.bin`, `<sha256>.2.bin`, …. A
/// chunk never straddles two: the writer starts the next segment at the next multiple of
/// ``segmentBytes`` in the object's offsets, so segment `k` holds the chunks whose `objectOffset` is in
/// `[k·S, (k+1)·S)`, at `objectOffset − k·S`. Before format 6 an object is one file without extension.
public struct ObjectNaming: Sendable, Equatable {
    /// The largest object file: under the 512 MB that common CDN plans cache.
    public static let segmentBytes: Int64 = 256 << 20
    /// The extension of every immutable object name.
    public static let fileExtension = "bin"
    /// Whether names end in `.bin` and objects are cut in segments (format 6 on).
    public let segmented: Bool

    /// What publish writes now.
    public static let current = ObjectNaming(segmented: true)

    public init(segmented: Bool) { self.segmented = segmented }

    /// The naming of a manifest of format `format`.
    public init(format: Int) { segmented = format >= 6 }

    /// The segment holding stored offset `offset` of an object.
    public func segment(of offset: Int64) -> Int { segmented ? Int(offset / Self.segmentBytes) : 0 }

    /// Where the next chunk of `stored` bytes goes in an object whose stored bytes so far end at `end`
    /// (``current`` naming): at `end` when it fits in that segment, else at the next segment's start;
    /// `opens` when a new segment file begins there (a segment filled to the byte is followed by a new
    /// one; the first chunk's file is the object's first).
    static func place(after end: Int64, stored: Int64, segmentBytes: Int64 = segmentBytes) -> (
        offset: Int64, opens: Bool
    ) {
        let inSegment = end % segmentBytes
        guard end > 0, inSegment == 0 || inSegment + stored > segmentBytes else { return (end, false) }
        return (inSegment == 0 ? end : (end / segmentBytes + 1) * segmentBytes, true)
    }

    /// Where segment `segment` starts in the object's offsets.
    public func base(of segment: Int) -> Int64 { Int64(segment) * Self.segmentBytes }

    /// The name, relative to the origin, of segment `segment` of object `id`.
    public func path(_ id: SHA256Digest, segment: Int = 0) -> String { path(hex: id.hex, segment: segment) }

    func path(hex: String, segment: Int) -> String {
        let base = "\(OriginLayout.objectsFolderName)/\(hex.prefix(2))/\(hex)"
        guard segmented else { return base }
        return segment == 0 ? "\(base).\(Self.fileExtension)" : "\(base).\(segment).\(Self.fileExtension)"
    }

    /// Every segment name that `file`'s chunks sit in, in the order of their first chunk (one for a file
    /// that fits in its own object, none without chunks; from format 7 also those of other objects).
    func paths(of file: FileEntry) -> [String] {
        var seen = Set<String>(), out: [String] = []
        for chunk in file.chunks {
            let name = path(chunk.object(in: file), segment: segment(of: chunk.objectOffset))
            if seen.insert(name).inserted { out.append(name) }
        }
        return out
    }

    /// The object an object file's name (in `objects/<ab>/`) names, and the segment: both namings.
    static func parse(_ name: String) -> (SHA256Digest, segment: Int)? {
        let parts = name.split(separator: ".", omittingEmptySubsequences: false)
        guard let sha = SHA256Digest(hex: String(parts[0])) else { return nil }
        switch parts.count {
        case 1: return (sha, 0)
        case 2 where parts[1] == fileExtension[...]: return (sha, 0)
        case 3 where parts[2] == fileExtension[...]:
            guard let k = Int(parts[1]), k > 0, String(k) == parts[1] else { return nil }
            return (sha, k)
        default: return nil
        }
    }
}
