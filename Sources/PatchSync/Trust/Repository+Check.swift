import Foundation

extension Repository {
    /// One thing `repo check` found wrong with the builds a repository lists, with the command that fixes it.
    public struct ListingProblem: Codable, Sendable, Equatable {
        public enum Kind: String, Codable, Sendable {
            /// Clients refuse the build's manifest (or preload plan): its channel cannot be installed.
            case refusedByClients
            /// A preload whose release time has passed and whose key is not released.
            case overduePreload
            /// A pending preload below the build players install: released, it would never be installed.
            case strandedPreload
            /// A bucket serving the origin lacks a signed file players may ask for (`repo check --bucket`).
            case missingFromBucket
            /// Objects named as before format 6, which CDNs do not cache by default (`repo check`).
            case uncacheableName
            /// Objects over 256 MiB, which common CDN plans do not cache.
            case oversizedObject
            /// The CDN front (`repo check --cdn`) answered a range with the whole file.
            case rangeIgnored
            /// The CDN front showed no cache hit on a second request.
            case notCached
            /// The CDN front serves metadata older than its max-age allows, or promises a longer max-age.
            case metadataCachedTooLong
            /// The CDN front sends other bytes than the origin folder holds.
            case cdnWrongBytes
            /// The CDN front could not be asked.
            case cdnUnreachable
            /// A signed target that names a build but that players never read as one (not at its build's
            /// manifest path, or with a channel or build id clients refuse): no command lists, shows or
            /// prunes it.
            case unlistedTarget
            /// Snapshot and timestamp are still signed by the online key a newer root replaced: a rotation
            /// stopped half way, and players that took the new root refuse updates.
            case stoppedRotation
        }
        public var kind: Kind
        public var channel: String
        public var buildId: String
        public var problem: String
        public var fix: String

        public init(kind: Kind, channel: String, buildId: String, problem: String, fix: String) {
            self.kind = kind
            self.channel = channel
            self.buildId = buildId
            self.problem = problem
            self.fix = fix
        }
    }

    /// Every listed build a client would refuse, every preload overdue by more than `late` at `now`, and
    /// every pending preload a newer build left behind. Manifests are read as clients read them; a
    /// sealed one is opened with its released key, or only its plan is read while it is pending.
    public func listingProblems(now: Date, late: TimeInterval) -> [ListingProblem] {
        var found = unlistedTargets()
        for listing in ChannelListing.all(self) {
            for build in listing.builds {
                let (channel, id) = (listing.channel, build.info.buildId)
                do throws(PatchSyncError) {
                    if build.pending {
                        _ = try Repository.plan(in: origin, build.path, build.file)
                    } else {
                        _ = try Repository.manifest(in: origin, build.path, build.file, released: releasedKeys)
                    }
                } catch {
                    found.append(
                        ListingProblem(
                            kind: .refusedByClients, channel: channel, buildId: id,
                            problem: "players would refuse build \(id) of \(channel): \(error.message)",
                            fix:
                                "patchsync repo withdraw \(id) --channel \(channel) --origin \(origin) --targets-key … --online-key …"
                        ))
                    continue
                }
                guard build.pending, let releaseAt = build.info.preload?.releaseAt else { continue }
                if listing.isStranded(build) {
                    found.append(
                        ListingProblem(
                            kind: .strandedPreload, channel: channel, buildId: id,
                            problem:
                                "preload \(id) of \(channel) is older than build \(listing.current?.info.buildId ?? ""), "
                                + "which players install: it would never be installed",
                            fix:
                                "patchsync repo withdraw \(id) --channel \(channel) --origin \(origin) --targets-key … --online-key …"
                        ))
                } else if releaseAt.addingTimeInterval(late) < now {
                    found.append(
                        ListingProblem(
                            kind: .overduePreload, channel: channel, buildId: id,
                            problem:
                                "preload \(id) of \(channel) was due at \(Repository.day(releaseAt)) and is not released "
                                + "(is the `repo refresh` job running, with the content keys at hand?)",
                            fix: "patchsync repo release \(id) --channel \(channel) --origin \(origin) --online-key …"))
                }
            }
        }
        return found
    }

    /// The paths of targets with a build's custom fields that ``ChannelListing`` does not read as a build.
    func unlistedTargetPaths() -> [String] {
        let channels = Set(targetFiles.values.compactMap { $0.custom?.channel })
        let read = Set(channels.flatMap { ChannelListing.targets(targetFiles, channel: $0).map(\.path) })
        return targetFiles.keys.sorted().filter { targetFiles[$0]?.custom != nil && !read.contains($0) }
    }

    /// Each target of ``unlistedTargetPaths()``, as a problem `repo prune` fixes.
    func unlistedTargets() -> [ListingProblem] {
        unlistedTargetPaths().compactMap { path -> ListingProblem? in
            guard let info = targetFiles[path]?.custom else { return nil }
            return ListingProblem(
                kind: .unlistedTarget, channel: info.channel, buildId: info.buildId,
                problem:
                    "target \(path) names build \(info.buildId) of \(info.channel), but players never read it as one "
                    + "(a build's target is at manifests/<channel>/<build>.json.gz, with a valid channel and build id)",
                fix: "patchsync repo prune --origin \(origin) --keep … --targets-key … --online-key … "
                    + "(it signs targets again without it; no PatchSync command writes such a target)")
        }
    }
}
