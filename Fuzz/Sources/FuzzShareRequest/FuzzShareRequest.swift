import Foundation
@_spi(Fuzzing) import PatchSync

/// libFuzzer entry point for the LAN share's request parser (see Fuzz/README.md).
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzShareRequest(_ start: UnsafeRawPointer, _ count: Int) -> CInt {
    FuzzTargets.shareRequest(Data(bytes: start, count: count))
    return 0
}
