import Foundation
import PatchSync

/// Loads each key file.
func loadKeys(_ paths: [String]) throws(PatchSyncError) -> [SigningKey] {
    var keys: [SigningKey] = []
    for path in paths { keys.append(try SigningKey.load(path: path)) }
    return keys
}

/// The content-key folder publish, release and refresh use: `given`, else the one a preload publish of
/// `origin` recorded, else `content/` beside the given key file.
func contentKeyFolder(_ given: String?, origin: String, beside keyFile: String) -> String {
    given ?? Repository.recordedContentKeys(origin: origin) ?? defaultContentKeys(beside: keyFile)
}

/// `content/` beside the given key file.
func defaultContentKeys(beside keyFile: String) -> String {
    let parent = keyFile.contains("/") ? String(keyFile[..<keyFile.lastIndex(of: "/")!]) : "."
    return parent + "/content"
}
