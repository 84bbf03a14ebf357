import Foundation

/// An object of a build stored sealed (AES-256-GCM, a preload build's new content): the name clients
/// fetch it by, and the units it was cut into. File entries and delta packs name it by its plain
/// SHA-256 as usual; the client reads it through ``SealedLayout``.
public struct SealedObject: Codable, Hashable, Sendable {
    /// The plain object's SHA-256, which file entries and delta packs name.
    public var object: SHA256Digest
    /// The SHA-256 of the sealed bytes, which name it in the origin.
    public var sealed: SHA256Digest
    /// The sealed length: the plain length plus 16 bytes per unit.
    public var length: Int64
    /// The build whose content key sealed it (this build, or an earlier preload whose object it shares).
    public var keyBuild: String
    /// The plain length of each unit, in order: a unit per chunk of a file or pack object (so a chunk
    /// is fetched and opened alone), 1 MiB units for a delta pack.
    public var units: [Int]
}

/// Where a sealed object's units sit: unit `i` covers the plain bytes from the sum of the units
/// before it, and is stored as its ciphertext then its 16-byte tag, after `i` earlier tags.
struct SealedLayout: Sendable {
    let units: [Int]
    /// Plain offset of each unit, and one past the last.
    let starts: [Int64]

    init(units: [Int]) {
        self.units = units
        var starts: [Int64] = [0]
        starts.reserveCapacity(units.count + 1)
        for unit in units { starts.append(starts[starts.count - 1] + Int64(unit)) }
        self.starts = starts
    }

    var plainLength: Int64 { starts[starts.count - 1] }
    var sealedLength: Int64 { plainLength + Int64(units.count * ContentKey.tagBytes) }

    /// The unit that starts at plain offset `offset`, if one does.
    func unit(startingAt offset: Int64) -> Int? {
        var low = 0, high = units.count
        while low < high {
            let mid = (low + high) / 2
            if starts[mid] < offset { low = mid + 1 } else { high = mid }
        }
        return low < units.count && starts[low] == offset ? low : nil
    }

    /// The sealed bytes of units `first...last`.
    func sealedRange(_ first: Int, _ last: Int) -> (offset: Int64, length: Int64) {
        let start = starts[first] + Int64(first * ContentKey.tagBytes)
        let end = starts[last + 1] + Int64((last + 1) * ContentKey.tagBytes)
        return (start, end - start)
    }

    /// Fixed units of `size` bytes (the last one shorter) over `length` plain bytes.
    static func fixed(length: Int64, size: Int = 1 << 20) -> [Int] {
        guard length > 0 else { return [0] }
        var units: [Int] = []
        var left = length
        while left > 0 {
            units.append(Int(min(left, Int64(size))))
            left -= Int64(size)
        }
        return units
    }
}

/// What a client needs to preload a sealed build before its release, in the clear: its bundles, the
/// sealed objects and the ranges to fetch from each recent build (no file name, no plaintext hash of new
/// content). Published gzip'd as the build's manifest target, with ``ManifestTargetInfo/preload`` set.
/// Its JSON Schema is `manifests/preload-plan.schema.json`.
public struct PreloadPlan: Codable, Hashable, Sendable {
    public static let formatVersion = 1
    public var formatVersion: Int
    public var buildId: String
    public var channel: String
    public var releaseAt: Date
    /// ``ContentKey/commitment(build:)`` of each content key the build needs, by build: its own, and
    /// those of earlier preloads whose sealed objects it shares.
    public var keys: [String: String]
    /// The sealed manifest: gzip'd manifest JSON sealed in 1 MiB units with this build's key; its
    /// `object` is a label (``manifestLabel(channel:build:)``), not a hash of the plain manifest.
    public var manifest: SealedObject
    public var bundles: [Bundle]
    /// Every sealed object of the build, with the bundles whose files (or delta packs) use it.
    public var objects: [PlanObject]
    /// The plain objects in the origin that the build shares (kept by `repo prune`).
    public var sharedObjects: [SHA256Digest]
    /// Per recent build (those with a delta pack to this one): what a player with that build whole
    /// fetches for each bundle, as a sync after the release would (delta pack, then chunk ranges).
    public var routes: [Route]

    /// A range of an object, and the SHA-256 of its bytes as stored (sealed or not).
    public struct SealedRange: Codable, Hashable, Sendable {
        public var object: SHA256Digest
        public var offset: Int64
        public var length: Int64
        public var sha256: SHA256Digest
    }

    public struct PlanObject: Codable, Hashable, Sendable {
        public var sealed: SHA256Digest
        public var length: Int64
        public var bundles: [String]
    }

    public struct Route: Codable, Hashable, Sendable {
        public var from: String
        /// Bundle name → ranges; a range that two bundles need is listed under both.
        public var bundles: [String: [SealedRange]]
    }

    /// The label (nonce source) of a build's sealed manifest: the first listing's, or, for a manifest
    /// sealed anew when the build is listed again with `sequence`, one that names it (a nonce is never
    /// used twice with one key).
    static func manifestLabel(channel: String, build: String, relistedAs sequence: Int? = nil) -> SHA256Digest {
        guard let sequence else {
            return SHA256Hasher.hash(Data("patchsync sealed manifest 1\0\(channel)\0\(build)".utf8))
        }
        return SHA256Hasher.hash(Data("patchsync sealed manifest 2\0\(channel)\0\(build)\0\(sequence)".utf8))
    }

    /// The sealed manifest read from the origin folder and opened with `key` (publisher side).
    func openManifest(in origin: String, key: ContentKey) throws(PatchSyncError) -> Manifest {
        let data = try FileSystem.read(
            OriginLayout(root: origin).objectFile(manifest.sealed), limit: Int(manifest.length) + 1)
        guard SHA256Hasher.hash(data) == manifest.sealed else {
            throw PatchSyncError(
                .refusedData, "the sealed manifest of \(buildId) in \(origin) does not match its signed hash")
        }
        return try openManifest(data, key: key)
    }

    /// Decodes a plan from its gzip'd JSON, refusing a newer format by name.
    static func decode(_ data: Data, what: String) throws(PatchSyncError) -> PreloadPlan {
        let json = try Zlib.gunzip(data, limit: Manifest.maximumInflatedSize, what: what)
        let plan: PreloadPlan
        do { plan = try TUFCoding.decoder.decode(PreloadPlan.self, from: json) } catch {
            throw PatchSyncError(.refusedData, "\(what) is not a PatchSync preload plan", cause: error)
        }
        guard plan.formatVersion <= formatVersion else {
            throw PatchSyncError(
                .refusedData,
                "\(what) has preload plan format \(plan.formatVersion); this client reads "
                    + "up to \(formatVersion)", remedy: "update PatchSync to preload this build")
        }
        return plan
    }

    func encoded() throws(PatchSyncError) -> Data {
        do { return Zlib.gzip(try TUFCoding.encoder.encode(self)) } catch { throw PatchSyncError.wrap(error) }
    }

    /// The ranges a player fetches for `bundles`, holding the builds `held` (the live one first): none when it
    /// holds this build, the route from the first held build the plan has one from, else every sealed
    /// object of those bundles whole. Each range once.
    func ranges(for bundles: Set<String>, from held: [String]) -> [SealedRange] {
        var seen = Set<SealedRange>(), out: [SealedRange] = []
        // The build itself held (a rollback back to it, listed again): its files are copied, nothing fetched.
        if held.contains(buildId) { return [] }
        // The route from the first held build that has one (the live build, else a kept one: a player who
        // took a hotfix listed below this preload still has the build the preload was routed from).
        if let route = held.lazy.compactMap({ build in self.routes.first { $0.from == build } }).first {
            for bundle in self.bundles where bundles.contains(bundle.name) {
                for range in route.bundles[bundle.name] ?? [] where seen.insert(range).inserted { out.append(range) }
            }
            return out
        }
        for object in objects where object.bundles.contains(where: bundles.contains) {
            out.append(SealedRange(object: object.sealed, offset: 0, length: object.length, sha256: object.sealed))
        }
        return out
    }
}

/// The preload part of a manifest target's custom fields: the target is a ``PreloadPlan``.
public struct PreloadInfo: Codable, Hashable, Sendable {
    public var releaseAt: Date
    public init(releaseAt: Date) { self.releaseAt = releaseAt }
}

/// Where the content keys of preload builds go once released: targets of the delegated `releases`
/// role, which the online key signs (so the `repo refresh` cron job can release at the release time
/// without the targets key), at `releases/<channel>/<build>.key`.
enum Releases {
    static let role = "releases"
    /// A key file is a few hundred bytes; a client reads at most this much.
    static let maxKeyBytes: Int64 = 64 << 10
}

/// UTC times as metadata writes them ("2026-12-01T17:00:00Z"), for the command line.
public enum TUFDate {
    public static func parse(_ text: String) -> Date? { TUFCoding.parse(text) }
    public static func format(_ date: Date) -> String { TUFCoding.format(date) }
}
