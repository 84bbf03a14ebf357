import Foundation
import Logging
import Synchronization

/// Where an unlocked preload build's objects come from: its sealed objects opened with the released
/// keys, from the preload store (or fetched into it whole when a range is missing), and the plain
/// ranges the preload fetched. Every chunk still goes through the pipeline's plaintext hash check.
struct SealedSource: Sendable {
    let store: PreloadStore
    let keys: [String: ContentKey]
    /// The build's sealed objects, by plain object.
    let sealed: [SHA256Digest: SealedObject]
    /// The store's files kept once the build is staged: the plan and the sealed manifest, which later
    /// syncs open again.
    let keep: Set<String>

    func isSealed(_ object: SHA256Digest) -> Bool { sealed[object] != nil }

    /// The stored bytes of each need (chunks of one object), as the plain object holds them: opened
    /// from sealed units, or read from preloaded plain ranges; nil when they are plain and not all here
    /// (fetched from the origin as usual).
    func stored(_ needs: [Plan.Need], origin: Origin) async throws(PatchSyncError) -> [[UInt8]]? {
        let object = needs[0].object
        guard let sealedObject = sealed[object] else {
            var out: [[UInt8]] = []
            for need in needs {
                guard
                    let bytes = try store.read(
                        object: object, offset: need.chunk.objectOffset,
                        length: Int64(need.chunk.objectLength))
                else { return nil }
                out.append(bytes)
            }
            return out
        }
        let layout = SealedLayout(units: sealedObject.units)
        var out: [[UInt8]] = []
        for need in needs {
            guard let unit = layout.unit(startingAt: need.chunk.objectOffset),
                sealedObject.units[unit] == need.chunk.objectLength
            else {
                throw PatchSyncError(
                    .refusedData, "a chunk of sealed object \(sealedObject.sealed) does not start one of its units")
            }
            out.append(try await open(sealedObject, unit: unit, layout: layout, origin: origin))
        }
        return out
    }

    /// Unit `unit` of a sealed object, opened: from a preloaded range that holds it, else from the whole
    /// sealed object, fetched into the store first.
    private func open(
        _ object: SealedObject, unit: Int, layout: SealedLayout,
        origin: Origin
    ) async throws(PatchSyncError) -> [UInt8] {
        let span = layout.sealedRange(unit, unit)
        var sealedBytes = try store.read(object: object.sealed, offset: span.offset, length: span.length)
        if sealedBytes == nil {
            try await store.fetchShared(
                PreloadPlan.SealedRange(
                    object: object.sealed, offset: 0, length: object.length,
                    sha256: object.sealed), origin: origin)
            sealedBytes = try store.read(object: object.sealed, offset: span.offset, length: span.length)
        }
        guard let sealedBytes, let key = keys[object.keyBuild] else {
            throw PatchSyncError(
                .internal, "sealed object \(object.sealed) is neither preloaded nor fetched, or has no key")
        }
        var plain = [UInt8](repeating: 0, count: object.units[unit])
        let ok = sealedBytes.withUnsafeBytes { sealedRaw in
            plain.withUnsafeMutableBytes {
                Sealer(key: key, build: object.keyBuild).open(sealedRaw, object: object, index: unit, into: $0)
            }
        }
        guard ok else {
            store.drop(object: object.sealed, offset: span.offset)
            throw PatchSyncError(
                .refusedData,
                "preloaded data of build \(object.keyBuild) (object \(object.sealed), unit \(unit)) "
                    + "fails authentication: it was tampered with or damaged",
                remedy: "nothing was installed and the live build is untouched; the damaged part was "
                    + "deleted and is fetched again at the next sync")
        }
        return plain
    }

    /// Opens a whole sealed object (a delta pack) into the plain file `local`, checked against its plain SHA-256.
    func openWhole(_ object: SealedObject, to local: String, origin: Origin) async throws(PatchSyncError) {
        let layout = SealedLayout(units: object.units)
        do {
            try FileSystem.makeDirectory(FileSystem.parent(of: local))
            let output = try FileDescriptor.ownFile(InstallLayout.opening(local), flags: O_WRONLY | O_CREAT | O_TRUNC)
            let hasher = SHA256Hasher()
            for unit in object.units.indices {
                let plain = try await open(object, unit: unit, layout: layout, origin: origin)
                let failure: Errno? = plain.withUnsafeBytes { raw in
                    hasher.update(raw)
                    do throws(Errno) { try output.write(raw, at: layout.starts[unit]) } catch { return error }
                    return nil
                }
                if let failure { throw failure }
            }
            guard hasher.finish() == object.object else {
                throw PatchSyncError(
                    .refusedData, "sealed object \(object.sealed) opens to other bytes than its plain SHA-256")
            }
            try output.sync()
            try FileSystem.rename(InstallLayout.opening(local), local)
        } catch { throw PatchSyncError.wrap(error) }
    }
}
