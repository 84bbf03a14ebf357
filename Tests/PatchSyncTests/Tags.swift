import Testing

extension Tag {
    /// Pure logic, milliseconds.
    @Tag static var small: Self
    /// Real files, SQLite, libcurl on file:// origins.
    @Tag static var medium: Self
    /// A real nginx origin and whole syncs.
    @Tag static var large: Self
}
