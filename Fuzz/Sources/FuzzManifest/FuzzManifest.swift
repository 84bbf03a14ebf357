import Foundation
@_spi(Fuzzing) import PatchSync

/// libFuzzer entry point for the manifest target (see Fuzz/README.md).
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzManifest(_ start: UnsafeRawPointer, _ count: Int) -> CInt {
    FuzzTargets.manifest(Data(bytes: start, count: count))
    return 0
}
