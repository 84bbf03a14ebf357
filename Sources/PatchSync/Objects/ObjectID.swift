/// Where objects live in an origin: `objects/<first two hex digits>/<sha256>` (``OriginLayout``).
public enum ObjectID {
    /// The object's path relative to the origin root.
    public static func path(_ id: SHA256Digest) -> String { OriginLayout.object(id) }
}
