import Foundation
@_spi(Fuzzing) import PatchSync

/// libFuzzer entry point for the canonical-json target (see Fuzz/README.md).
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzCanonicalJson(_ start: UnsafeRawPointer, _ count: Int) -> CInt {
    FuzzTargets.canonicalJSON(Data(bytes: start, count: count))
    return 0
}
