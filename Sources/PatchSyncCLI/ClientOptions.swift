import ArgumentParser

/// Options every client verb takes.
struct ClientOptions: ParsableArguments {
    @Option(help: "The install folder (default: the current directory).")
    var install: String = "."

    @Flag(help: "Print one JSON object (progress events one per line before it).")
    var json = false
}
