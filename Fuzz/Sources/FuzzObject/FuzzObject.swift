import Foundation
@_spi(Fuzzing) import PatchSync

/// libFuzzer entry point for the object target (see Fuzz/README.md).
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzObject(_ start: UnsafeRawPointer, _ count: Int) -> CInt {
    FuzzTargets.object(Data(bytes: start, count: count))
    return 0
}
