extension Duration {
    /// The duration in seconds, fractions included: `.milliseconds(1500).inSeconds == 1.5`.
    public var inSeconds: Double { self / .seconds(1) }
}
