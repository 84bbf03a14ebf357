import Foundation

/// Seals objects with a build's content key, and opens their units: each unit is AES-256-GCM with a
/// nonce derived from the object and the unit's index, and associated data that binds the build, the
/// object, the unit's place and the unit count (``ContentKey``).
struct Sealer: Sendable {
    let key: ContentKey
    /// The build whose key this is (bound into every unit).
    let build: String

    /// Seals the plain object at `plain` (named `object`) in `units` into `origin`'s objects, under
    /// the SHA-256 of the sealed bytes.
    func seal(file plain: String, object: SHA256Digest, units: [Int], into origin: String) throws(PatchSyncError)
        -> SealedObject
    {
        let layout = SealedLayout(units: units)
        let folder = OriginLayout(root: origin)
        let temp = folder.incomingSealed(UInt64.random(in: 0...UInt64.max))
        do {
            try FileSystem.makeDirectory(folder.incomingFolder)
            let input = try FileDescriptor(path: plain, flags: O_RDONLY)
            guard try input.status().st_size == layout.plainLength else {
                throw Errno(EINVAL, "sealing (its units do not cover it)", plain)
            }
            let output = try FileDescriptor(path: temp, flags: O_WRONLY | O_CREAT | O_EXCL, mode: 0o644)
            let hasher = SHA256Hasher()
            let largest = units.max() ?? 0
            let inBuffer = UnsafeMutableRawBufferPointer.allocate(byteCount: max(1, largest), alignment: 16)
            let outBuffer = UnsafeMutableRawBufferPointer.allocate(
                byteCount: largest + ContentKey.tagBytes, alignment: 16)
            defer {
                inBuffer.deallocate()
                outBuffer.deallocate()
            }
            var position: Int64 = 0
            for (index, unit) in units.enumerated() {
                let plainUnit = UnsafeMutableRawBufferPointer(rebasing: inBuffer[..<unit])
                try input.read(into: plainUnit, at: layout.starts[index])
                let sealed = UnsafeMutableRawBufferPointer(rebasing: outBuffer[..<(unit + ContentKey.tagBytes)])
                try sealUnit(
                    UnsafeRawBufferPointer(plainUnit), object: object, index: index, of: units.count, into: sealed)
                try output.write(UnsafeRawBufferPointer(sealed), at: position)
                hasher.update(UnsafeRawBufferPointer(sealed))
                position += Int64(sealed.count)
            }
            try output.sync()
            let sha = hasher.finish()
            try ObjectWriter.place(temp, as: folder.objectFile(sha))
            return SealedObject(object: object, sealed: sha, length: position, keyBuild: build, units: units)
        } catch {
            try? FileSystem.remove(temp)
            throw PatchSyncError.wrap(error).during("sealing object \(object)")
        }
    }

    /// `data` sealed in 1 MiB units (the manifest): the sealed bytes and their layout.
    func seal(_ data: Data, object: SHA256Digest) throws(PatchSyncError) -> (Data, SealedObject) {
        let units = SealedLayout.fixed(length: Int64(data.count))
        var out = Data(count: data.count + units.count * ContentKey.tagBytes)
        let layout = SealedLayout(units: units)
        var failure: PatchSyncError?
        data.withUnsafeBytes { (plain: UnsafeRawBufferPointer) in
            out.withUnsafeMutableBytes { (sealed: UnsafeMutableRawBufferPointer) in
                for (index, unit) in units.enumerated() where failure == nil {
                    let start = Int(layout.starts[index])
                    let range = layout.sealedRange(index, index)
                    do throws(PatchSyncError) {
                        try sealUnit(
                            UnsafeRawBufferPointer(rebasing: plain[start..<(start + unit)]), object: object,
                            index: index, of: units.count,
                            into: UnsafeMutableRawBufferPointer(
                                rebasing: sealed[Int(range.offset)..<Int(range.offset + range.length)]))
                    } catch { failure = error }
                }
            }
        }
        if let failure { throw failure }
        let sealedObject = SealedObject(
            object: object, sealed: SHA256Hasher.hash(out), length: Int64(out.count),
            keyBuild: build, units: units)
        return (out, sealedObject)
    }

    private func sealUnit(
        _ plain: UnsafeRawBufferPointer, object: SHA256Digest, index: Int, of count: Int,
        into out: UnsafeMutableRawBufferPointer
    ) throws(PatchSyncError) {
        try key.seal(
            plain, nonce: ContentKey.nonce(object: object.hex, unit: index),
            aad: ContentKey.associatedData(build: build, object: object.hex, unit: index, of: count), into: out)
    }

    /// Opens unit `index` of `sealed` (its sealed bytes) into `out`; false when it does not authenticate.
    func open(
        _ sealed: UnsafeRawBufferPointer, object: SealedObject, index: Int,
        into out: UnsafeMutableRawBufferPointer
    ) -> Bool {
        key.open(
            sealed, nonce: ContentKey.nonce(object: object.object.hex, unit: index),
            aad: ContentKey.associatedData(
                build: build, object: object.object.hex, unit: index, of: object.units.count),
            into: out)
    }

    /// Opens a whole sealed object held in memory (the manifest); nil when any unit fails.
    func open(_ data: Data, object: SealedObject) -> Data? {
        let layout = SealedLayout(units: object.units)
        guard Int64(data.count) == layout.sealedLength else { return nil }
        var out = Data(count: Int(layout.plainLength))
        let ok = data.withUnsafeBytes { sealed in
            out.withUnsafeMutableBytes { plain in
                object.units.indices.allSatisfy { index in
                    let range = layout.sealedRange(index, index)
                    let start = Int(layout.starts[index])
                    return open(
                        UnsafeRawBufferPointer(rebasing: sealed[Int(range.offset)..<Int(range.offset + range.length)]),
                        object: object, index: index,
                        into: UnsafeMutableRawBufferPointer(rebasing: plain[start..<(start + object.units[index])]))
                }
            }
        }
        return ok ? out : nil
    }

    /// The units of a chunked object: one per distinct chunk of the manifest's entries that name it, when
    /// they tile it; nil when they do not (it is then cut in fixed units).
    static func chunkUnits(of object: SHA256Digest, entries: [FileEntry], length: Int64) -> [Int]? {
        var spans = Set<[Int64]>()
        for entry in entries {
            for chunk in entry.chunks where chunk.object(in: entry) == object {
                spans.insert([chunk.objectOffset, Int64(chunk.objectLength)])
            }
        }
        var units: [Int] = [], position: Int64 = 0
        for span in spans.sorted(by: { $0[0] < $1[0] }) {
            guard span[0] == position else { return nil }
            units.append(Int(span[1]))
            position += span[1]
        }
        return position == length && !units.isEmpty ? units : nil
    }
}

extension PreloadPlan {
    /// The manifest opened from its sealed bytes with `key`, checked to be this plan's build; refused
    /// when it does not authenticate (a wrong key, tampered bytes).
    func openManifest(_ sealed: Data, key: ContentKey) throws(PatchSyncError) -> Manifest {
        guard keys[buildId] == key.commitment(build: buildId) else {
            throw PatchSyncError(
                .refusedData, "the content key offered for build \(buildId) is not the key it was sealed with",
                remedy: "nothing was decrypted and the live build is untouched; the publisher must "
                    + "release the build's own key (`patchsync repo release \(buildId)`)")
        }
        guard let gz = Sealer(key: key, build: buildId).open(sealed, object: manifest) else {
            throw PatchSyncError(
                .refusedData, "the sealed manifest of build \(buildId) fails authentication (tampered or damaged)",
                remedy: "nothing was installed; it is fetched again at the next sync — if it fails again, "
                    + "the origin serves tampered data: report it to the publisher")
        }
        let decoded = try Manifest.decode(gz, what: "the manifest of build \(buildId)")
        guard decoded.buildId.value == buildId, decoded.channel.name == channel else {
            throw PatchSyncError(
                .refusedData,
                "the sealed manifest of \(buildId) describes build \(decoded.buildId) of \(decoded.channel)")
        }
        return decoded
    }
}
