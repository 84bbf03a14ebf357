import Foundation

/// A place staging gets chunk bytes from: an unlocked preload's store, the origin's ranges (and later
/// LAN peers). Staging asks each source in turn for what is still missing; a source delivers the chunks
/// it holds to the ``ChunkPipeline``, which checks each against its signed SHA-256 before it is written,
/// so staging never needs to know where bytes came from. (The live tree and kept builds are read
/// before any source is asked: ``LiveTree`` plans what they hold.)
protocol ChunkSource: Sendable {
    /// Delivers what this source holds of `needs` (chunks of one object, in object order) and returns
    /// the needs it did not deliver, for the next source. `delivered` is called with each group of
    /// needs made durable, for progress. Throws when the source delivered damaged bytes it cannot
    /// make good (a tampered preload) or when it gave up (every mirror failed).
    func deliver(
        _ needs: [Plan.Need], to pipeline: ChunkPipeline, files: StagedFiles,
        delivered: @escaping @Sendable ([Plan.Need]) -> Void
    ) async throws(PatchSyncError) -> [Plan.Need]

    /// Puts the whole object `object` (`length` stored bytes: a delta pack) at `local`, checked against
    /// its SHA-256; returns the bytes it fetched over the network, or nil when this source does not hold
    /// the object. `progress` is called with the bytes of the object so far.
    func whole(
        _ object: SHA256Digest, length: Int64, to local: String,
        progress: @escaping @Sendable (Int64) -> Void
    ) async throws(PatchSyncError) -> Int64?
}
