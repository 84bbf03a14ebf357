import Foundation
import Testing

@testable import PatchSync

@Suite("Whose file records a deployment's are")
struct RecordsKeyTests {
    static func identity(_ name: String) -> DeploymentIdentity {
        DeploymentIdentity(name: name, buildId: name, channel: "live", manifest: "m" + name)
    }

    /// Builds 1 and 2 applied; build 3 being staged.
    static func stagingThree() -> InstallState {
        var state = InstallState()
        for name in ["1", "2"] {
            state.beginStaging(identity(name), sequence: 1)
            _ = state.finishStaging(name, seal: nil)
            state.applied(identity(name))
        }
        state.beginStaging(identity("3"), sequence: 2)
        return state
    }

    @Test(
        "a staging in a recycled folder takes over its records, which no name can take; a recycling undone (a kill before the move, a failed move, a rollback to that build) gives them back to the build whose folder stayed in builds/"
    )
    func recycleAndUndo() {
        var state = Self.stagingThree()
        let taken = state.recycle("1", into: "3")
        #expect(taken)
        #expect(state.recordsKey(of: "3") == "1")
        #expect(state.recordsKey(of: "1") != "1", "the recycled build keeps no records of its own")
        #expect(state.isRecorded("1"))
        state.recycleUndone("1")
        #expect(state.recordsKey(of: "1") == "1")
        #expect(state.recordsKey(of: "3") == "3")

        var rolled = Self.stagingThree()
        let rolledTaken = rolled.recycle("1", into: "3")
        #expect(rolledTaken)
        rolled.rolledBack(to: "1")
        #expect(rolled.current == "1")
        #expect(rolled.recordsKey(of: "1") == "1", "the build rolled back to is live with its own records")
        #expect(rolled.recordsKey(of: "3") == "3")
    }

    @Test("a build staged in a recycled folder keeps that folder's records once applied, and a resume keeps them")
    func appliedKeepsTheFoldersRecords() {
        var state = Self.stagingThree()
        let taken = state.recycle("1", into: "3")
        #expect(taken)
        state.beginStaging(Self.identity("3"), sequence: 2)  // a resumed run
        #expect(state.recordsKey(of: "3") == "1")
        let ready = state.finishStaging("3", seal: nil)
        #expect(ready == nil)
        state.applied(state.ready ?? Self.identity("3"))
        #expect(state.recordsKey(of: "3") == "1")
        #expect(state.recycling == nil)
    }
}
