import CallRouting
import Crypto
import Foundation
import Push
import SIPDNS
import SIPProxy
import Registrar
import RouseLog
import RouseVocabulary
import SIPMessage
import SIPTransport

/// Why a configuration was refused: every bad setting, each named, in one message.
public struct ConfigurationError: Error, Sendable, CustomStringConvertible {
    public let problems: [String]

    public var description: String {
        "invalid configuration:\n" + problems.map { "  - " + $0 }.joined(separator: "\n")
    }
}

/// Builds a `RouseConfiguration` from, in increasing precedence: the defaults, an optional JSON
/// config file (`--config FILE` or `ROUSE_CONFIG`), `ROUSE_*` environment variables, and flags.
public enum ConfigurationLoader {
    /// Where each raw value came from, so errors can say which source to fix.
    struct RawValue {
        let text: String
        let source: String
    }

    /// - Parameters:
    ///   - flags: `--key value` or `--key=value` pairs (already stripped of the command name).
    ///   - environment: the process environment.
    public static func load(flags: [String], environment: [String: String]) throws(ConfigurationError) -> RouseConfiguration {
        var problems: [String] = []
        var raw: [String: RawValue] = [:]
        let known = Set(RouseConfiguration.settings.map(\.key))
        let byFlag = Dictionary(uniqueKeysWithValues: RouseConfiguration.settings.map { ($0.flag, $0.key) })

        // Flags first, to find --config.
        var flagValues: [String: String] = [:]
        var configPath = environment["ROUSE_CONFIG"]
        var index = 0
        while index < flags.count {
            let argument = flags[index]
            var name = argument
            var value: String? = nil
            if let eq = argument.firstIndex(of: "="), argument.hasPrefix("--") {
                name = String(argument[..<eq])
                value = String(argument[argument.index(after: eq)...])
            }
            guard name == "--config" || byFlag[name] != nil else {
                problems.append("unknown option '\(name)' (see rouse serve --help)")
                index += 1
                continue
            }
            if value == nil {
                guard index + 1 < flags.count else {
                    problems.append("option '\(name)' needs a value")
                    break
                }
                value = flags[index + 1]
                index += 1
            }
            if name == "--config" { configPath = value } else { flagValues[byFlag[name]!] = value }
            index += 1
        }

        if let configPath, !configPath.isEmpty {
            do {
                for (key, value) in try readConfigFile(configPath) {
                    if known.contains(key) {
                        raw[key] = RawValue(text: value, source: "config file \(configPath)")
                    } else {
                        problems.append("\(key): unknown setting in config file \(configPath)")
                    }
                }
            } catch {
                problems.append("config file \(configPath): \(error)")
            }
        }
        for setting in RouseConfiguration.settings {
            if let value = environment[setting.environmentVariable] {
                raw[setting.key] = RawValue(text: value, source: setting.environmentVariable)
            }
        }
        for (key, value) in flagValues {
            raw[key] = RawValue(text: value, source: "--" + key.replacingOccurrences(of: "_", with: "-"))
        }

        var reader = SettingReader(raw: raw)
        let baseConfiguration = RouseConfiguration(
            databaseURL: reader.string("database_url"),
            sipListen: reader.listenPoints("sip_listen"),
            tlsCertificatePath: reader.optionalPath("tls_cert"),
            tlsKeyPath: reader.optionalPath("tls_key"),
            httpListen: reader.hostPort("http_listen"),
            sipAliases: reader.list("sip_aliases"),
            logLevel: reader.choice("log_level", LogLevel.allCases),
            logFormat: reader.choice("log_format", LogFormat.allCases),
            parserLimits: SIPParserLimits(
                maxMessageBytes: reader.integer("sip_max_message_bytes", 1_024...16_777_216),
                maxHeaderCount: reader.integer("sip_max_headers", 16...10_000),
                maxLineBytes: reader.integer("sip_max_line_bytes", 256...1_048_576)),
            tcpMaxConnections: reader.integer("tcp_max_connections", 1...1_000_000),
            tcpIdleTimeout: reader.duration("tcp_idle_timeout"),
            tlsHandshakeTimeout: reader.duration("tls_handshake_timeout"),
            timerT1: reader.duration("sip_t1"),
            timerT2: reader.duration("sip_t2"),
            timerT4: reader.duration("sip_t4"),
            databaseConnectTimeout: reader.integer("database_connect_timeout", 1...600),
            registrationDefaultExpires: reader.integer("registration_default_expires", 1...31_536_000),
            registrationMinExpires: reader.integer("registration_min_expires", 1...31_536_000),
            registrationMaxExpires: reader.integer("registration_max_expires", 1...31_536_000),
            pushBindingMinExpires: reader.integer("push_binding_min_expires", 1...31_536_000),
            pushBindingMaxExpires: reader.integer("push_binding_max_expires", 1...31_536_000),
            maxBindingsPerExtension: reader.integer("max_bindings_per_extension", 1...1_000),
            nonceLifetime: reader.duration("nonce_lifetime"),
            authFailureLimit: reader.integer("auth_failure_limit", 1...1_000_000),
            authFailureWindow: reader.duration("auth_failure_window"),
            authBlockDuration: reader.duration("auth_block_duration"),
            apnsProductionURL: reader.url("apns_production_url"),
            apnsSandboxURL: reader.url("apns_sandbox_url"),
            fcmURL: reader.url("fcm_url"),
            pushCAFile: reader.optionalPath("push_ca_file"),
            pushTimeout: reader.duration("push_timeout"))
        var withCalls = baseConfiguration
        withCalls.wakeWait = reader.duration("wake_wait")
        withCalls.wakeWaitWithDeskPhone = reader.duration("wake_wait_with_desk_phone")
        withCalls.ringTimeout = reader.duration("ring_timeout")
        withCalls.cancelGrace = reader.duration("cancel_grace")
        withCalls.bindingRefreshLead = reader.duration("binding_refresh_lead")
        if withCalls.bindingRefreshLead < .seconds(120) {
            problems.append("binding_refresh_lead: at least 120 seconds (RFC 8599 §5.5)")
        }
        withCalls.trustedPeers = reader.list("trusted_peers")
        withCalls.webPushContact = reader.contactURI("webpush_contact")
        withCalls.webPushAllowedHosts = reader.list("webpush_allowed_hosts")
        withCalls.sipRateLimit = reader.integer("sip_rate_limit", 0...10_000_000)
        withCalls.httpRateLimit = reader.integer("http_rate_limit", 0...10_000_000)
        withCalls.pushAttempts = reader.integer("push_attempts", 1...10)
        withCalls.pushBreakerFailures = reader.integer("push_breaker_failures", 1...1_000_000)
        withCalls.pushBreakerBackoff = reader.duration("push_breaker_backoff")
        withCalls.pushBreakerMaxBackoff = reader.duration("push_breaker_max_backoff")
        if withCalls.pushBreakerMaxBackoff < withCalls.pushBreakerBackoff {
            problems.append("push_breaker_max_backoff: must not be shorter than push_breaker_backoff")
        }
        withCalls.tlsClientCAPath = reader.optionalPath("tls_client_ca")
        withCalls.tlsRequireClientCertificate = reader.boolean("tls_require_client_cert")
        if withCalls.tlsRequireClientCertificate, withCalls.tlsClientCAPath == nil {
            problems.append("tls_require_client_cert: needs tls_client_ca (the CA client certificates are checked against)")
        }
        withCalls.httpTrustedProxies = reader.list("http_trusted_proxies")
        do {
            _ = try TrustedPeers(parsing: withCalls.httpTrustedProxies)
        } catch {
            problems.append("http_trusted_proxies: \"\(error.entry)\" is not an IP address or CIDR block")
        }
        withCalls.shutdownGrace = reader.duration("shutdown_grace")
        withCalls.adminSessionLifetime = reader.duration("admin_session_lifetime")
        withCalls.digestAlgorithms = reader.digestAlgorithms("digest_algorithms")
        withCalls.flowTimer = reader.integer("flow_timer", 0...86_400)
        withCalls.testPushInterval = reader.duration("test_push_interval")
        withCalls.outsideCallClass = reader.classOfService("outside_call_class")
        func limit(_ key: String) -> Int? {
            let value = reader.integer(key, 0...1_000_000)
            return value == 0 ? nil : value
        }
        withCalls.outsideCallLimits = OutsideCallLimits(
            concurrentPerExtension: limit("outside_calls_per_extension"), concurrentPerOrganisation: limit("outside_calls_per_organisation"),
            perHourPerExtension: limit("outside_calls_per_hour_per_extension"),
            perHourPerOrganisation: limit("outside_calls_per_hour_per_organisation"),
            surgeFactor: Double(reader.integer("outside_call_surge_factor", 1...1_000)))
        withCalls.dnsServers = reader.dnsServers("dns_servers")
        withCalls.gatewayRegisterExpires = reader.integer("gateway_register_expires", 60...86_400)
        for entry in reader.list("gateway_pbx") {
            do {
                let pbx = try UpstreamPBX(parsing: entry, expires: withCalls.gatewayRegisterExpires)
                guard (try? SocketAddress(ip: pbx.host.trimmingCharacters(in: CharacterSet(charactersIn: "[]")), port: UInt16(pbx.port))) != nil else {
                    problems.append("gateway_pbx: the PBX of \(pbx.organisation) must be an IP address, not \(pbx.host)")
                    continue
                }
                withCalls.gatewayPBXs.append(pbx)
            } catch {
                problems.append("gateway_pbx: \(error.description)")
            }
        }
        withCalls.declineIsBusy = reader.boolean("decline_is_busy")
        withCalls.maxDiversions = reader.integer("max_diversions", 0...20)
        withCalls.staleAfterPushes = reader.integer("stale_after_pushes", 1...1000)
        withCalls.staleAfter = reader.duration("stale_after")
        withCalls.historyRetention = reader.duration("history_retention")
        do {
            withCalls.secrets = try SecretsKeySource.load(file: reader.optionalString("secrets_key_file"), environment: environment)
        } catch {
            problems.append(error.description)
        }
        withCalls.wakeCredentials = reader.boolean("wake_credentials")
        withCalls.pushProxy = reader.proxy("push_proxy")
        withCalls.sipThreads = reader.integer("sip_threads", 0...256)
        do {
            _ = try TrustedPeers(parsing: withCalls.trustedPeers)
        } catch {
            problems.append("trusted_peers: \(error.description)")
        }
        problems.append(contentsOf: reader.problems)

        let configuration = withCalls
        if configuration.sipListen.contains(where: { $0.transport == .tls }) {
            if configuration.tlsCertificatePath == nil {
                problems.append("tls_cert: a tls: listen point needs a certificate (ROUSE_TLS_CERT)")
            }
            if configuration.tlsKeyPath == nil {
                problems.append("tls_key: a tls: listen point needs a private key (ROUSE_TLS_KEY)")
            }
        }
        if configuration.registrationMinExpires > configuration.registrationMaxExpires {
            problems.append("registration_min_expires: must not exceed registration_max_expires")
        }
        if !(configuration.registrationMinExpires...configuration.registrationMaxExpires).contains(configuration.registrationDefaultExpires),
            configuration.registrationMinExpires <= configuration.registrationMaxExpires
        {
            problems.append("registration_default_expires: must lie between registration_min_expires and registration_max_expires")
        }
        if configuration.pushBindingMinExpires > configuration.pushBindingMaxExpires {
            problems.append("push_binding_min_expires: must not exceed push_binding_max_expires")
        }
        if configuration.timerT2 < configuration.timerT1 {
            problems.append("sip_t2: must not be shorter than sip_t1")
        }
        guard problems.isEmpty else { throw ConfigurationError(problems: problems) }
        return configuration
    }

    /// Reads a flat JSON object; numbers, booleans and strings become text, arrays of strings a
    /// comma list.
    static func readConfigFile(_ path: String) throws -> [(String, String)] {
        let data: Data
        do {
            data = try Data(contentsOf: URL(fileURLWithPath: path))
        } catch {
            throw ConfigFileError("cannot read it")
        }
        let values: [String: ConfigFileValue]
        do {
            values = try JSONDecoder().decode([String: ConfigFileValue].self, from: data)
        } catch DecodingError.typeMismatch(_, let context) where !context.codingPath.isEmpty {
            throw ConfigFileError("\(context.codingPath[0].stringValue): must be a string, a number, true/false or a list of strings")
        } catch {
            throw ConfigFileError("not a JSON object of settings")
        }
        var result: [(String, String)] = []
        for (key, value) in values.sorted(by: { $0.key < $1.key }) {
            result.append((key, value.text))
        }
        return result
    }

    /// A setting's value in the config file, as text.
    struct ConfigFileValue: Decodable {
        let text: String

        init(from decoder: any Decoder) throws {
            let container = try decoder.singleValueContainer()
            if let value = try? container.decode(Bool.self) {
                text = value ? "true" : "false"
            } else if let value = try? container.decode(Int.self) {
                text = String(value)
            } else if let value = try? container.decode(Double.self) {
                text = String(value)
            } else if let value = try? container.decode(String.self) {
                text = value
            } else if let value = try? container.decode([String].self) {
                text = value.joined(separator: ",")
            } else {
                throw DecodingError.typeMismatch(
                    String.self, .init(codingPath: decoder.codingPath, debugDescription: "unsupported value"))
            }
        }
    }

    struct ConfigFileError: Error, CustomStringConvertible {
        let description: String
        init(_ description: String) { self.description = description }
    }
}

/// Turns raw setting texts into typed values, collecting a problem for each bad one (and
/// falling back to the default so that every problem is reported in one go).
struct SettingReader {
    let raw: [String: ConfigurationLoader.RawValue]
    var problems: [String] = []

    private func text(_ key: String) -> (String, String) {
        if let value = raw[key] { return (value.text, value.source) }
        let setting = RouseConfiguration.settings.first { $0.key == key }!
        return (setting.defaultValue, "default")
    }

    private mutating func problem(_ key: String, _ source: String, _ message: String) {
        problems.append("\(key): \(message) (from \(source))")
    }

    /// The text as given; nil when empty.
    func optionalString(_ key: String) -> String? {
        let value = text(key).0.trimmingCharacters(in: .whitespaces)
        return value.isEmpty ? nil : value
    }

    mutating func string(_ key: String) -> String {
        let (value, source) = text(key)
        if value.trimmingCharacters(in: .whitespaces).isEmpty { problem(key, source, "must not be empty") }
        return value
    }

    mutating func optionalPath(_ key: String) -> String? {
        let (value, source) = text(key)
        guard !value.isEmpty else { return nil }
        if !FileManager.default.isReadableFile(atPath: value) {
            problem(key, source, "cannot read file '\(value)'")
        }
        return value
    }

    /// An http(s) base URL.
    mutating func url(_ key: String) -> String {
        let (value, source) = text(key)
        guard let components = URLComponents(string: value), components.scheme == "https" || components.scheme == "http",
            components.host?.isEmpty == false
        else {
            problem(key, source, "'\(value)' is not an https:// URL")
            return value
        }
        return value
    }

    /// Empty (nil), or an HTTP(S) proxy URL; a problem never quotes it (it may hold a password).
    mutating func proxy(_ key: String) -> PushProxy? {
        let (value, source) = text(key)
        guard !value.trimmingCharacters(in: .whitespaces).isEmpty else { return nil }
        do {
            return try PushProxy(parsing: value)
        } catch {
            problem(key, source, error.description)
            return nil
        }
    }

    /// Empty, or a `mailto:` or `https:` URI (RFC 8292 §2.1's `sub`).
    mutating func contactURI(_ key: String) -> String {
        let (value, source) = text(key)
        let lower = value.lowercased()
        guard value.isEmpty || ((lower.hasPrefix("mailto:") || lower.hasPrefix("https://")) && value.count > 8
            && !value.unicodeScalars.contains { $0.value <= 0x20 || $0.value >= 0x7F })
        else {
            problem(key, source, "'\(value)' is not a mailto: or https: URI")
            return ""
        }
        return value
    }

    /// `internal`, `national` or `international`.
    mutating func classOfService(_ key: String) -> ClassOfService {
        let (value, source) = text(key)
        guard let found = ClassOfService(rawValue: value.trimmingCharacters(in: .whitespaces).lowercased()) else {
            problem(key, source, "'\(value)' is not internal, national or international")
            return .national
        }
        return found
    }

    /// `ip` or `ip:port` (IPv6 as `[::1]:53`), port 53 by default.
    mutating func dnsServers(_ key: String) -> [(ip: String, port: UInt16)] {
        let (_, source) = text(key)
        var servers: [(ip: String, port: UInt16)] = []
        for entry in list(key) {
            guard let hop = try? RouteHop(parsing: entry), hop.target.hostIsAddress else {
                problem(key, source, "'\(entry)' is not an IP address with an optional port")
                continue
            }
            servers.append((hop.target.host, hop.target.port ?? 53))
        }
        return servers
    }

    /// `true`/`false` (also `1`/`0`, `yes`/`no`, `on`/`off`).
    mutating func boolean(_ key: String) -> Bool {
        let (value, source) = text(key)
        switch value.trimmingCharacters(in: .whitespaces).lowercased() {
        case "true", "1", "yes", "on": return true
        case "false", "0", "no", "off": return false
        default:
            problem(key, source, "'\(value)' is not true or false")
            return RouseConfiguration.settings.first { $0.key == key }!.defaultValue == "true"
        }
    }

    mutating func list(_ key: String) -> [String] {
        text(key).0.split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty }
    }

    /// An ordered comma list of digest algorithms (`MD5`, `SHA-256`; any case), each once.
    mutating func digestAlgorithms(_ key: String) -> [Digest.Algorithm] {
        let (value, source) = text(key)
        var algorithms: [Digest.Algorithm] = []
        for name in list(key) {
            guard let algorithm = Digest.Algorithm.allCases.first(where: { $0.rawValue.caseInsensitiveEquals(name) }) else {
                problem(key, source, "'\(name)' is not MD5 or SHA-256")
                continue
            }
            if algorithms.contains(algorithm) {
                problem(key, source, "\(algorithm.rawValue) is named twice")
            } else {
                algorithms.append(algorithm)
            }
        }
        if value.trimmingCharacters(in: .whitespaces).isEmpty { problem(key, source, "names no algorithm (MD5, SHA-256)") }
        return algorithms.isEmpty ? DigestAuthenticator.defaultAlgorithms : algorithms
    }

    mutating func listenPoints(_ key: String) -> [ListenPoint] {
        let (value, source) = text(key)
        var points: [ListenPoint] = []
        for item in value.split(separator: ",").map({ $0.trimmingCharacters(in: .whitespaces) }) where !item.isEmpty {
            do {
                points.append(try ListenPoint(parsing: item))
            } catch {
                problem(key, source, "'\(item)' is not transport:host:port (\(error))")
            }
        }
        if points.isEmpty, problems.isEmpty || !problems.last!.hasPrefix(key) {
            problem(key, source, "needs at least one listen point")
        }
        return points
    }

    mutating func hostPort(_ key: String) -> String {
        let (value, source) = text(key)
        guard let colon = value.lastIndex(of: ":"), let port = Int(value[value.index(after: colon)...]),
            (0...65535).contains(port), colon > value.startIndex
        else {
            problem(key, source, "'\(value)' is not host:port")
            return value
        }
        return value
    }

    mutating func integer(_ key: String, _ range: ClosedRange<Int>) -> Int {
        let (value, source) = text(key)
        guard let number = Int(value.trimmingCharacters(in: .whitespaces)), range.contains(number) else {
            problem(key, source, "'\(value)' is not a whole number from \(range.lowerBound) to \(range.upperBound)")
            return Int(RouseConfiguration.settings.first { $0.key == key }!.defaultValue)!
        }
        return number
    }

    /// Seconds as a number (`8`, `0.5`) or with a unit (`8s`, `500ms`, `2m`, `1h`).
    mutating func duration(_ key: String) -> Duration {
        let (value, source) = text(key)
        if let parsed = SettingReader.parseDuration(value), parsed > .zero { return parsed }
        problem(key, source, "'\(value)' is not a positive duration (seconds, or with s, ms, m, h, d)")
        return SettingReader.parseDuration(RouseConfiguration.settings.first { $0.key == key }!.defaultValue)!
    }

    static func parseDuration(_ text: String) -> Duration? {
        let trimmed = text.trimmingCharacters(in: .whitespaces).lowercased()
        let units: [(String, Double)] = [("ms", 0.001), ("s", 1), ("m", 60), ("h", 3600), ("d", 86400)]
        for (suffix, scale) in units where trimmed.hasSuffix(suffix) {
            guard let number = Double(trimmed.dropLast(suffix.count)), number.isFinite, number >= 0 else { return nil }
            return .milliseconds(Int64((number * scale * 1000).rounded()))
        }
        guard let number = Double(trimmed), number.isFinite, number >= 0 else { return nil }
        return .milliseconds(Int64((number * 1000).rounded()))
    }

    mutating func choice<T: RawRepresentable & CaseIterable>(_ key: String, _ cases: T.AllCases) -> T where T.RawValue == String {
        let (value, source) = text(key)
        if let match = cases.first(where: { $0.rawValue == value.lowercased() }) { return match }
        problem(key, source, "'\(value)' is not one of \(cases.map(\.rawValue).joined(separator: ", "))")
        return cases.first!
    }
}
