import ArgumentParser
import Foundation
import PatchSync

/// `patchsync config`: reads and changes an install's configuration (`.patchsync/config.json`).
struct ConfigCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "config",
        abstract: "Show or change an install's settings (download speed limit, background rules, mirrors).",
        discussion: """
            Settings are the keys of .patchsync/config.json; `config get` lists them all. Rates and sizes \
            take K, M or G (binary multiples); lists (remotes, playHours, bundles) are comma-separated; \
            `unset` restores a setting's default. A running sync applies a new maxBytesPerSecond (or \
            discretionaryMaxBytesPerSecond, for a background one) within a second.

            Examples:
              patchsync config get --install ~/Games/forest
              patchsync config set maxBytesPerSecond 2M --install ~/Games/forest
              patchsync config set playHours 18:00-23:30 --install ~/Games/forest
              patchsync config unset maxBytesPerSecond --install ~/Games/forest
            """,
        subcommands: [Get.self, Set.self, Unset.self],
        defaultSubcommand: Get.self)

    struct Get: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Print every setting, or one.",
            discussion: """
                Examples:
                  patchsync config get --install ~/Games/forest --json
                  patchsync config get maxBytesPerSecond --install ~/Games/forest
                """)
        @OptionGroup var options: ClientOptions
        @Argument(help: "The setting to print (default: all).") var key: String?

        func run() async throws {
            let install = try options.openInstall()
            let settings = try ConfigCommand.settings(try install.config())
            if let key {
                let value = try ConfigCommand.check(key, in: settings)
                struct One: Encodable {
                    var key: String
                    var value: JSONValue
                }
                Output(json: options.json).result(One(key: key, value: value), human: value.text)
            } else {
                let human = settings.keys.sorted().map { "\($0) = \(settings[$0]!.text)" }.joined(separator: "\n")
                Output(json: options.json).result(settings, human: human)
            }
        }
    }

    struct Set: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Change one setting.",
            discussion: """
                Example:
                  patchsync config set maxBytesPerSecond 2M --install ~/Games/forest
                """)
        @OptionGroup var options: ClientOptions
        @Argument(help: "The setting (see `config get`).") var key: String
        @Argument(
            help:
                "Its new value: a number (rates and sizes take K, M, G), true or false, text, or a comma-separated list."
        )
        var value: String

        func run() async throws {
            try ConfigCommand.change(options, key) { kind throws(PatchSyncError) in
                try JSONValue.parse(value, as: kind, key: key)
            }
        }
    }

    struct Unset: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Restore one setting's default.",
            discussion: """
                Example:
                  patchsync config unset maxBytesPerSecond --install ~/Games/forest
                """)
        @OptionGroup var options: ClientOptions
        @Argument(help: "The setting (see `config get`).") var key: String

        func run() async throws {
            try ConfigCommand.change(options, key) { kind throws(PatchSyncError) in
                guard kind.optional else {
                    throw PatchSyncError(
                        .usage, "\(key) has no default", remedy: "set it to a value: patchsync config set \(key) VALUE")
                }
                return .null
            }
        }
    }

    /// Sets `key` to what `value` makes of its kind, checks the whole configuration, saves it and prints it.
    static func change(_ options: ClientOptions, _ key: String, _ value: (Kind) throws(PatchSyncError) -> JSONValue)
        throws
    {
        let install = try options.openInstall()
        var result: [String: JSONValue] = [:]
        try install.updateConfig { (config: inout InstallConfig) throws(PatchSyncError) in
            var settings = try settings(config)
            _ = try check(key, in: settings)
            settings[key] = try value(kind(of: key))
            config = try decode(settings)
            result = try Self.settings(config)
        }
        let shown = result[key] ?? .null
        Output(json: options.json).result(result, human: "\(key) = \(shown.text)")
    }

    /// Every setting, nil ones as null.
    static func settings(_ config: InstallConfig) throws(PatchSyncError) -> [String: JSONValue] {
        var settings: [String: JSONValue] = [:]
        for key in keys { settings[key] = .null }
        do {
            let data = try JSONEncoder().encode(config)
            let object = try JSONDecoder().decode([String: JSONValue].self, from: data)
            settings.merge(object) { $1 }
        } catch { throw PatchSyncError(.internal, "encoding the configuration: \(error)") }
        return settings
    }

    static func decode(_ settings: [String: JSONValue]) throws(PatchSyncError) -> InstallConfig {
        do {
            return try JSONDecoder().decode(
                InstallConfig.self, from: try JSONEncoder().encode(settings.filter { $0.value != .null }))
        } catch { throw PatchSyncError(.usage, "that value does not fit the setting", cause: error) }
    }

    /// The value of a known key; a usage error naming the keys otherwise.
    static func check(_ key: String, in settings: [String: JSONValue]) throws(PatchSyncError) -> JSONValue {
        guard let value = settings[key] else {
            throw PatchSyncError(
                .usage, "\(key) is no setting", remedy: "choose one of: " + keys.sorted().joined(separator: ", "))
        }
        return value
    }

    /// What a setting holds: read from InstallConfig's own properties.
    struct Kind {
        enum Base { case integer, bool, string, list }
        var base: Base
        var optional: Bool
    }

    static let kinds: [String: Kind] = {
        var kinds: [String: Kind] = [:]
        for child in Mirror(reflecting: InstallConfig(remotes: [], channel: "")).children {
            guard let label = child.label else { continue }
            let type = String(describing: Swift.type(of: child.value))
            let optional = type.hasPrefix("Optional<")
            let base: Kind.Base =
                type.contains("Array<")
                ? .list : type.contains("Int") ? .integer : type.contains("Bool") ? .bool : .string
            kinds[label] = Kind(base: base, optional: optional)
        }
        return kinds
    }()

    static var keys: [String] { Array(kinds.keys) }

    static func kind(of key: String) -> Kind { kinds[key] ?? Kind(base: .string, optional: true) }
}

/// Settings as the library's JSON values: how a person reads one, and how one is read from a person.
extension JSONValue {
    /// As a person reads it.
    var text: String {
        switch self {
        case .null: return "(default)"
        case .bool(let value): return String(value)
        case .integer(let value): return String(value)
        case .number(let value): return String(value)
        case .string(let value): return value
        case .array(let values): return values.map(\.text).joined(separator: ",")
        case .object: return "(object)"
        }
    }

    /// `text` as a value of `kind`.
    static func parse(_ text: String, as kind: ConfigCommand.Kind, key: String) throws(PatchSyncError) -> JSONValue {
        let trimmed = text.trimmingCharacters(in: .whitespaces)
        switch kind.base {
        case .integer:
            if let value = Int64(trimmed) { return .integer(value) }
            if let value = try? ByteCount.parseRate(trimmed) { return .integer(Int64(value)) }
            throw PatchSyncError(
                .usage, "\(key) takes a number, not '\(text)'", remedy: "give a number such as 500K, 2M or 8")
        case .bool:
            switch trimmed.lowercased() {
            case "true", "yes", "on", "1": return .bool(true)
            case "false", "no", "off", "0": return .bool(false)
            default: throw PatchSyncError(.usage, "\(key) takes true or false, not '\(text)'")
            }
        case .string: return .string(trimmed)
        case .list:
            return .array(
                trimmed.split(separator: ",").map { .string($0.trimmingCharacters(in: .whitespaces)) }.filter {
                    $0 != .string("")
                })
        }
    }
}
