import Foundation
@_spi(Fuzzing) import PatchSync

/// libFuzzer entry point for the metadata target (see Fuzz/README.md).
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzMetadata(_ start: UnsafeRawPointer, _ count: Int) -> CInt {
    FuzzTargets.metadata(Data(bytes: start, count: count))
    return 0
}
