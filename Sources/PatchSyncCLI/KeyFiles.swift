import Foundation
import PatchSync

/// Loads each key file.
func loadKeys(_ paths: [String]) throws(PatchSyncError) -> [SigningKey] {
    var keys: [SigningKey] = []
    for path in paths { keys.append(try SigningKey.load(path: path)) }
    return keys
}

/// The content-key folder publish and refresh use by default: `content/` beside the given key file.
func defaultContentKeys(beside keyFile: String) -> String {
    let parent = keyFile.contains("/") ? String(keyFile[..<keyFile.lastIndex(of: "/")!]) : "."
    return parent + "/content"
}
