import Foundation
import Synchronization

/// Turns a step's transfer counts into the whole update's: records the update's totals the first
/// time (a fresh plan counts what this install lacks), and later runs of the same update read them.
///
/// Thread-safety: a `Mutex` holds the current step; transfer events are decorated from any thread.
final class UpdateTotals: Sendable {
    private struct Step {
        var added: [String]
        /// Update bytes done when this step's transfer starts.
        var base: Int64
        /// This step's fetch as planned now (after resume) and as first recorded.
        var planned: Int64
        var recorded: Int64
        var installed: Int64
    }
    private struct State {
        var record: UpdateRecord
        var manifest: Manifest
        var steps: [[String]]
        var step: Step?
        /// The update bytes last shown: never goes back.
        var shown: Int64 = 0
    }

    private let state = Mutex<State?>(nil)
    private let store: StateStore

    init(store: StateStore) { self.store = store }

    /// An update to `manifest` (its signed hash `sha`) with the `wanted` bundles begins; `steps` are
    /// the cumulative bundle lists of its steps, as the selection orders them. The totals recorded by an
    /// earlier run of the same update are read.
    func start(_ manifest: Manifest, sha: String, wanted: [String], steps: [[String]]) throws(PatchSyncError) {
        let recorded = try store.read().update
        let fresh = UpdateRecord(manifest: sha, bundles: wanted, totalBytes: -1, stepBytes: [:])
        let record = recorded.flatMap { $0.manifest == sha && $0.bundles == wanted ? $0 : nil } ?? fresh
        state.withLock { $0 = State(record: record, manifest: manifest, steps: steps) }
    }

    /// The update's transfers are over (what follows, a preload, counts on its own).
    func finish() { state.withLock { $0 = nil } }

    /// A step begins with `plan` (what is left of it, after what an earlier run of it verified), the bytes
    /// it downloads for that (`downloading`: a delta pack replaces the chunks of the files it covers) and
    /// the live content it plans against: the bytes the later steps still lack put this step on the
    /// update's scale.
    func begin(_ bundles: [String], plan: Plan, downloading: Int64, live: LiveTree) throws(PatchSyncError) {
        guard let (manifest, steps) = state.withLock({ s in s.map { ($0.manifest, $0.steps) } }) else { return }
        let index = steps.firstIndex(of: bundles) ?? steps.count
        let added = index == 0 ? bundles : bundles.filter { !(steps[index - 1]).contains($0) }
        let key = added.joined(separator: ",")
        let planned = downloading
        let planChunks = Set(plan.fetch.map(\.chunk.sha256) + plan.local.map(\.0.chunk.sha256))
        var later: [String: Int64] = [:]
        var laterTotal: Int64 = 0
        for (previous, next) in zip(steps.dropFirst(index), steps.dropFirst(index + 1)) {
            let adds = next.filter { !previous.contains($0) }
            let files = manifest.selecting(adds)
            let laterPlan = Plan(manifest: files, live: live.linkable, liveChunks: live.chunks, done: [])
            let bytes = laterPlan.fetch.filter { !planChunks.contains($0.chunk.sha256) }.reduce(Int64(0)) {
                $0 + Int64($1.chunk.objectLength)
            }
            later[adds.joined(separator: ","), default: 0] += bytes
            laterTotal += bytes
        }
        let installed = manifest.selecting(added).files.reduce(Int64(0)) { $0 + $1.size }
        let record = state.withLock { held -> UpdateRecord? in
            guard var s = held else { return nil }
            defer { held = s }
            var changed = false
            if s.record.totalBytes < 0 || s.record.stepBytes[key] == nil {
                // First sight of this update (or of this step): the totals from this plan.
                let before = s.record.totalBytes < 0 ? 0 : max(0, s.record.totalBytes - planned - laterTotal)
                s.record.stepBytes[key] = planned
                for (k, v) in later where s.record.stepBytes[k] == nil { s.record.stepBytes[k] = v }
                s.record.totalBytes = max(s.record.totalBytes, before + planned + laterTotal)
                changed = true
            }
            var base = s.record.totalBytes - planned - laterTotal
            if base < s.shown {
                // More is missing than the recorded total allows (files deleted by hand): the total grows.
                s.record.totalBytes += s.shown - base
                base = s.shown
                changed = true
            }
            let recorded = max(planned, s.record.stepBytes[key] ?? planned)
            s.step = Step(added: added, base: base, planned: planned, recorded: recorded, installed: installed)
            s.shown = max(s.shown, base)
            return changed ? s.record : nil
        }
        if let record { try store.update { $0.recordUpdate(record) } }
    }

    /// Adds the update's and the bundle's counts to a step's transfer status.
    func decorate(_ status: TransferStatus) -> TransferStatus {
        var status = status
        state.withLock { held in
            guard var s = held, let step = s.step else { return }
            defer { held = s }
            let total = s.record.totalBytes
            let left = max(0, status.total - status.done)
            let done =
                status.done >= status.total ? step.base + step.planned : step.base + min(status.done, step.planned)
            s.shown = min(total, max(s.shown, done))
            status.updateDone = s.shown
            status.updateTotal = total
            status.bundles = step.added
            status.bundleTotal = step.recorded
            status.bundleDone = max(0, step.recorded - min(left, step.recorded))
            status.bundleInstalledBytes = step.installed
        }
        return status
    }
}
