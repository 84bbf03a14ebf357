import Testing

@testable import PatchSync

@Suite("A channel name one typo from another", .tags(.small))
struct NewChannelCheckTests {
    @Test(
        "close means at most two edits, a swap of neighbours being one: lvie, liv, live2 are close to live; beta, stable are not",
        arguments: [("lvie", 1), ("liv", 1), ("live2", 1), ("lvei", 2), ("beta", 4), ("stable", 5), ("live", 0)])
    func distance(name: String, edits: Int) {
        #expect(NewChannelCheck.distance("live", name) == edits)
        #expect(NewChannelCheck.distance(name, "live") == edits, "the distance is symmetric")
    }
}
