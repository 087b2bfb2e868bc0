public import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// A local stand-in of APNs, FCM or a web push service (`Tests/PushStandIns/standin.py`) running
/// as a child process: HTTP/2 over TLS (ALPN h2) on a loopback port, its certificate signed by a
/// throw-away CA (`caFile`), every request it gets logged with the answer it gave (`requests()`).
///
/// `init` blocks while the Python venv is made or checked (`scripts/standins-venv.sh`) and until the
/// stand-in says it listens. Thread-safe; `stop()` (also run by `deinit`) ends the process and then
/// removes its state folder (also removed when `init` fails). The stand-in also exits by itself when
/// the test process dies (its standard input closes).
///
/// Scripted answers by device-token prefix (after every validation passed), APNs: `dead` 410
/// Unregistered, `badd` 400 BadDeviceToken, `0f0f` 400 DeviceTokenNotForTopic, `5555` 503
/// ServiceUnavailable the first time then 200, `500e` 500 InternalServerError the first time then
/// 200, `a11a` 429 TooManyRequests, `510e` never answered; `5a0d` (sandbox token) is BadDeviceToken
/// on production, `9d0d` (production token) BadDeviceToken on sandbox. FCM: `unregistered` 404
/// UNREGISTERED, `invalid` 400 INVALID_ARGUMENT, `mismatch` 403 SENDER_ID_MISMATCH, `unavailable`
/// 503 then 200, `internal` 500 then 200, `quota` 429 QUOTA_EXCEEDED with Retry-After, `stall` never
/// answered. Anything else: 200. Web push, by subscription name prefix: `gone` 410, `toolarge` 413,
/// `busy` 429, `unavailable` 503 then 201, `stall` never answered; anything else 201 (after the
/// VAPID JWT was checked and the payload decrypted with the subscription's keys). See
/// `Tests/PushStandIns/README.md`.
public final class PushStandIn: @unchecked Sendable {
    /// Which service the stand-in plays.
    public enum Role: String, Sendable {
        case apns
        case fcm
        case webpush
    }

    /// The APNs host a stand-in plays: its tokens are the other one's BadDeviceToken.
    public enum APNsEnvironment: String, Sendable {
        case production
        case sandbox
    }

    /// Why a stand-in could not be started or read.
    public struct Failure: Error, CustomStringConvertible {
        public let description: String
    }

    public let role: Role
    /// The loopback port it listens on.
    public let port: Int
    /// PEM of the CA that signed its certificate (pass as `CURLOPT_CAINFO`).
    public let caFile: String
    /// `https://127.0.0.1:<port>`.
    public var baseURL: String { "https://127.0.0.1:\(port)" }
    /// Its folder: `ca.pem`, `requests.jsonl`, `stderr.log`, and for FCM `service-account.json`.
    public let stateDirectory: String
    /// The folder `stateDirectory` names; give it to a new stand-in (`stateFolder:`) to restart this
    /// one after `stop(keepingState: true)`.
    public let stateFolder: TemporaryFolder
    public let requestsFile: String
    /// FCM only: a copy of the service account whose `token_uri` is this stand-in's `/token`.
    public let serviceAccountFile: String?
    /// FCM only: `https://127.0.0.1:<port>/token`.
    public let tokenURI: String?
    /// FCM only: the service account's `project_id`.
    public let projectID: String?
    /// Web push only: the subscriptions made at start (`webPush(subscriptions:)`), by name.
    public let subscriptions: [String: StandInWebPushSubscription]

    private let lock = NSLock()
    private var process: Process?
    private let standardInput: Pipe

    /// Starts `standin.py --role <role> <arguments>` (see `Tests/PushStandIns/README.md` for the
    /// flags) and waits up to `readyTimeout` seconds for its ready line. Its state goes in a new
    /// temporary folder, or in `stateFolder` (a stopped stand-in's: same CA, same request log).
    public init(role: Role, arguments: [String], readyTimeout: TimeInterval = 30, stateFolder: TemporaryFolder? = nil) throws {
        let python = try Self.venvPython()
        let folder = try stateFolder ?? TemporaryFolder(prefix: "rouse-standin-\(role.rawValue)")
        let stderrPath = folder.file("stderr.log")
        _ = FileManager.default.createFile(atPath: stderrPath, contents: nil)

        let process = Process()
        process.executableURL = URL(fileURLWithPath: python)
        process.arguments = [Self.repositoryRoot + "/Tests/PushStandIns/standin.py",
                             "--role", role.rawValue, "--state-dir", folder.path, "--exit-on-stdin-eof"] + arguments
        var environment = ProcessInfo.processInfo.environment
        environment["PYTHONDONTWRITEBYTECODE"] = "1"
        process.environment = environment
        let input = Pipe()
        let output = Pipe()
        process.standardInput = input
        process.standardOutput = output
        process.standardError = FileHandle(forWritingAtPath: stderrPath)
        try process.run()

        let line = ReadyLine()
        let reader = output.fileHandleForReading
        DispatchQueue.global().async {
            var buffer = Data()
            while true {
                let chunk = reader.availableData
                if chunk.isEmpty { break }
                buffer.append(chunk)
                if let newline = buffer.firstIndex(of: UInt8(ascii: "\n")) {
                    line.set(Data(buffer[buffer.startIndex..<newline]))
                    return
                }
            }
            line.set(nil)
        }
        let ready = line.wait(timeout: readyTimeout)
        func fail(_ why: String) -> Failure {
            if process.isRunning { process.terminate() }
            process.waitUntilExit()
            let errors = (try? String(contentsOfFile: stderrPath, encoding: .utf8)) ?? ""
            return Failure(description: "push stand-in (\(role.rawValue)) \(why); stderr: \(errors)")
        }
        guard let data = ready ?? nil else {
            throw fail(ready == nil ? "not ready within \(readyTimeout) s" : "exited before it was ready")
        }
        guard let fields = try? JSONDecoder().decode(ReadyFields.self, from: data) else {
            throw fail("printed an unreadable ready line: \(String(decoding: data, as: UTF8.self))")
        }
        self.role = role
        self.process = process
        self.standardInput = input
        port = fields.port
        caFile = fields.ca_file
        stateDirectory = folder.path
        self.stateFolder = folder
        requestsFile = fields.requests_file
        serviceAccountFile = fields.service_account_file
        tokenURI = fields.token_uri
        projectID = fields.project_id
        subscriptions = fields.subscriptions ?? [:]
    }

    /// An APNs stand-in: `keys` maps key IDs (JWT `kid`) to PEM files of their P-256 keys (a
    /// `.p8` from `makeAPNsKey()` will do); `teamID`, when given, must be the JWT's `iss`; `topics`
    /// are the allowed bundle IDs (empty: any).
    public static func apns(
        keys: [String: String], teamID: String? = nil, topics: [String] = [],
        environment: APNsEnvironment = .production, arguments: [String] = [], stateFolder: TemporaryFolder? = nil
    ) throws -> PushStandIn {
        var all = ["--environment", environment.rawValue]
        for (keyID, path) in keys.sorted(by: { $0.key < $1.key }) { all += ["--apns-key", "\(keyID)=\(path)"] }
        if let teamID { all += ["--apns-team-id", teamID] }
        if !topics.isEmpty { all += ["--apns-topics", topics.joined(separator: ",")] }
        return try PushStandIn(role: .apns, arguments: all + arguments, stateFolder: stateFolder)
    }

    /// An FCM stand-in (token endpoint and messages:send) for the service account at
    /// `serviceAccountPath` (`makeFCMServiceAccount(tokenURI:)`); give Rouse `serviceAccountFile`.
    /// `accessTokenTTL`: `expires_in` of the access tokens it issues; `revokeAfter`: after that many
    /// messages every access token issued so far is refused with 401, once.
    public static func fcm(
        serviceAccountPath: String, accessTokenTTL: Int? = nil, revokeAfter: Int? = nil, arguments: [String] = []
    ) throws -> PushStandIn {
        var all = ["--fcm-service-account", serviceAccountPath]
        if let accessTokenTTL { all += ["--access-token-ttl", String(accessTokenTTL)] }
        if let revokeAfter { all += ["--revoke-after", String(revokeAfter)] }
        return try PushStandIn(role: .fcm, arguments: all + arguments)
    }

    /// A web push service stand-in with a subscription made at start for each of `subscriptions`
    /// (`self.subscriptions[name]`); a name's prefix scripts its answers (`gone…` 410, …).
    public static func webPush(subscriptions: [String] = [], arguments: [String] = []) throws -> PushStandIn {
        try PushStandIn(role: .webpush, arguments: subscriptions.flatMap { ["--subscription", $0] } + arguments)
    }

    /// Web push: a new subscription, as a browser makes one with `PushManager.subscribe`; given an
    /// `applicationServerKey` (base64url), the stand-in refuses pushes signed with another key (403).
    /// Blocks while `curl` asks the stand-in.
    public func subscribe(name: String? = nil, applicationServerKey: String? = nil) throws -> StandInWebPushSubscription {
        var options: [String: String] = [:]
        if let name { options["name"] = name }
        if let applicationServerKey { options["applicationServerKey"] = applicationServerKey }
        let body = String(decoding: try JSONSerialization.data(withJSONObject: options, options: [.sortedKeys]), as: UTF8.self)
        let output = try Self.runTool([
            "curl", "-sS", "--http2", "--fail-with-body", "--max-time", "10", "--cacert", caFile, "-X", "POST",
            "-H", "content-type: application/json", "--data-binary", body, baseURL + "/subscribe",
        ])
        do {
            return try JSONDecoder().decode(StandInWebPushSubscription.self, from: Data(output.utf8))
        } catch {
            throw Failure(description: "the web push stand-in answered /subscribe with \(output)")
        }
    }

    /// Web push: the browser unsubscribed; the push service answers 410 Gone from now on.
    public func unsubscribe(_ subscription: StandInWebPushSubscription) throws {
        try Self.runTool([
            "curl", "-sS", "--http2", "--fail-with-body", "--max-time", "10", "--cacert", caFile, "-X", "DELETE",
            baseURL + "/subscription/" + subscription.id,
        ])
    }

    /// Every request received so far, oldest first (each is logged before it is answered).
    public func requests() throws -> [StandInRequest] {
        guard let data = FileManager.default.contents(atPath: requestsFile) else { return [] }
        let decoder = JSONDecoder()
        var requests: [StandInRequest] = []
        for line in data.split(separator: UInt8(ascii: "\n"), omittingEmptySubsequences: true) {
            do {
                requests.append(try decoder.decode(StandInRequest.self, from: Data(line)))
            } catch {
                if line.endIndex == data.endIndex { break }  // a line still being written
                throw Failure(description: "unreadable line in \(requestsFile): \(error)")
            }
        }
        return requests
    }

    /// Waits (polling, blocking) until at least `count` requests were received; returns them all.
    public func waitForRequests(count: Int, timeout: TimeInterval = 10) throws -> [StandInRequest] {
        let deadline = Date().addingTimeInterval(timeout)
        while true {
            let received = try requests()
            if received.count >= count { return received }
            if Date() >= deadline {
                throw Failure(description: "push stand-in (\(role.rawValue)) got \(received.count) requests, not \(count), within \(timeout) s")
            }
            Thread.sleep(forTimeInterval: 0.02)
        }
    }

    /// Stops the stand-in (SIGTERM, then SIGKILL after 5 s), waits for it, then removes its state
    /// folder unless `keepingState` (to restart it with `stateFolder:`). Idempotent.
    public func stop(keepingState: Bool = false) {
        lock.lock()
        let process = self.process
        self.process = nil
        lock.unlock()
        defer { if !keepingState { stateFolder.remove() } }
        guard let process else { return }
        if process.isRunning {
            process.terminate()
            let deadline = Date().addingTimeInterval(5)
            while process.isRunning && Date() < deadline { Thread.sleep(forTimeInterval: 0.01) }
            if process.isRunning { kill(process.processIdentifier, SIGKILL) }
        }
        process.waitUntilExit()
        try? standardInput.fileHandleForWriting.close()
    }

    deinit {
        stop()
    }

    // MARK: Keys and service accounts

    /// A new APNs-style signing key: P-256, PKCS#8 PEM like a `.p8` download, in a new temporary
    /// folder (removed with the last copy of the answer, or by its `remove()`). Blocks while
    /// `openssl` runs.
    public static func makeAPNsKey() throws -> APNsTestKey {
        let folder = try TemporaryFolder(prefix: "rouse-apns-key")
        let keyPath = folder.file("AuthKey.p8")
        try runTool(["openssl", "genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", keyPath])
        return APNsTestKey(privateKeyPEM: try String(contentsOfFile: keyPath, encoding: .utf8), keyPath: keyPath, folder: folder)
    }

    /// A new service-account JSON file (RSA 2048 key made by `openssl`) with `type`, `project_id`,
    /// `private_key_id`, `private_key`, `client_email`, `client_id` and `token_uri`, in a new
    /// temporary folder (removed with the last copy of the answer, or by its `remove()`). An FCM
    /// stand-in reads it at start and writes a copy pointing at itself (`serviceAccountFile`).
    public static func makeFCMServiceAccount(
        tokenURI: String = "https://oauth2.googleapis.com/token", projectID: String = "rouse-test"
    ) throws -> TemporaryFile {
        let folder = try TemporaryFolder(prefix: "rouse-fcm-account")
        let keyPath = folder.file("key.pem")
        try runTool(["openssl", "genpkey", "-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048", "-out", keyPath])
        let privateKey = try String(contentsOfFile: keyPath, encoding: .utf8)
        try FileManager.default.removeItem(atPath: keyPath)
        let keyID = (UUID().uuidString + UUID().uuidString).lowercased().replacingOccurrences(of: "-", with: "").prefix(40)
        let account: [String: String] = [
            "type": "service_account",
            "project_id": projectID,
            "private_key_id": String(keyID),
            "private_key": privateKey,
            "client_email": "rouse-push@\(projectID).iam.gserviceaccount.com",
            "client_id": String(UInt64.random(in: 100_000_000_000_000_000...999_999_999_999_999_999)),
            "auth_uri": "https://accounts.google.com/o/oauth2/auth",
            "token_uri": tokenURI,
        ]
        let path = folder.file("service-account.json")
        let data = try JSONSerialization.data(withJSONObject: account, options: [.prettyPrinted, .sortedKeys])
        try data.write(to: URL(fileURLWithPath: path))
        return TemporaryFile(path: path, folder: folder)
    }

    // MARK: Internals

    /// The checkout this file was compiled from: Sources/RouseTestSupport/PushStandIn.swift.
    static let repositoryRoot: String = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent().path

    private static let venv = VenvCache()

    /// The venv's python, made or checked by `scripts/standins-venv.sh` once per test process.
    static func venvPython() throws -> String {
        try venv.python {
            let output = try runTool(["bash", repositoryRoot + "/scripts/standins-venv.sh"])
            guard let path = output.split(separator: "\n").last.map(String.init),
                  FileManager.default.isExecutableFile(atPath: path) else {
                throw Failure(description: "scripts/standins-venv.sh printed no python path: \(output)")
            }
            return path
        }
    }

    /// Runs a command found on PATH; returns its standard output, throws with its standard error.
    @discardableResult
    private static func runTool(_ command: [String]) throws -> String {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        process.arguments = command
        process.currentDirectoryURL = URL(fileURLWithPath: repositoryRoot)
        let errorsFolder = try TemporaryFolder(prefix: "rouse-tool")
        defer { errorsFolder.remove() }
        let errorsPath = errorsFolder.file("stderr")
        _ = FileManager.default.createFile(atPath: errorsPath, contents: nil)
        let output = Pipe()
        process.standardOutput = output
        process.standardError = FileHandle(forWritingAtPath: errorsPath)
        process.standardInput = FileHandle.nullDevice
        try process.run()
        let data = output.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        guard process.terminationStatus == 0 else {
            let errors = (try? String(contentsOfFile: errorsPath, encoding: .utf8)) ?? ""
            throw Failure(description: "\(command.joined(separator: " ")) failed (\(process.terminationStatus)): \(errors)")
        }
        return String(decoding: data, as: UTF8.self)
    }

    private struct ReadyFields: Decodable {
        let port: Int
        let ca_file: String
        let requests_file: String
        let service_account_file: String?
        let token_uri: String?
        let project_id: String?
        let subscriptions: [String: StandInWebPushSubscription]?
    }

    /// The ready line, handed from the reading thread: nil = not yet; .some(nil) = EOF first.
    private final class ReadyLine: @unchecked Sendable {
        private let condition = NSCondition()
        private var value: Data??

        func set(_ line: Data?) {
            condition.lock()
            if value == nil { value = .some(line) }
            condition.broadcast()
            condition.unlock()
        }

        func wait(timeout: TimeInterval) -> Data?? {
            let deadline = Date().addingTimeInterval(timeout)
            condition.lock()
            defer { condition.unlock() }
            while value == nil && condition.wait(until: deadline) {}
            return value
        }
    }

    private final class VenvCache: @unchecked Sendable {
        private let lock = NSLock()
        private var path: String?

        func python(_ make: () throws -> String) throws -> String {
            lock.lock()
            defer { lock.unlock() }
            if let path { return path }
            let made = try make()
            path = made
            return made
        }
    }
}

/// An APNs signing key made by `PushStandIn.makeAPNsKey()`: its PEM, and its `.p8` file in a
/// `TemporaryFolder` of its own (removed with the last copy of this value, or by `remove()`).
public struct APNsTestKey: Sendable {
    public let privateKeyPEM: String
    public let keyPath: String
    public let folder: TemporaryFolder

    /// Deletes the key file (the folder).
    public func remove() { folder.remove() }
}

/// One request a `PushStandIn` received, as logged in its `requests.jsonl`.
public struct StandInRequest: Decodable, Sendable {
    /// When it was received (seconds since 1970).
    public let time: Double
    /// Which TLS connection (numbered from 1 in accept order) and HTTP/2 stream carried it.
    public let connection: Int
    public let stream: Int
    public let method: String
    public let path: String
    /// Header names in lower case, pseudo-headers (`:authority`, …) included; repeated ones joined by ", ".
    public let headers: [String: String]
    public let body: String
    /// The status answered; nil when the stream was held open unanswered (scripted stall).
    public let verdictStatus: Int?
    /// APNs `reason`, FCM `errorCode` (or `status` without one), OAuth `error`, "OK" on success, "Stalled".
    public let verdictReason: String
    /// Why, in words (e.g. which check failed); nil on plain success.
    public let verdictDetail: String?
    /// Decoded JWT (APNs `authorization`, or the OAuth `assertion`), when one was sent.
    public let jwtHeader: [String: StandInJSON]?
    public let jwtClaims: [String: StandInJSON]?
    /// Observations that did not change the answer (e.g. a notification block in an FCM message).
    public let notes: [String]
    /// Web push: the subscription id pushed to, and the payload as the stand-in decrypted it with
    /// the subscription's keys (nil for a push without payload, or one that did not decrypt). The
    /// raw body is in `body` as base64url.
    public let subscription: String?
    public let plaintext: String?
    /// Web push: the VAPID `k` (the application server's public key) of the Authorization header.
    public let vapidKey: String?

    enum CodingKeys: String, CodingKey {
        case time, connection, stream, method, path, headers, body, notes
        case verdictStatus = "verdict_status"
        case verdictReason = "verdict_reason"
        case verdictDetail = "verdict_detail"
        case jwtHeader = "jwt_header"
        case jwtClaims = "jwt_claims"
        case subscription, plaintext
        case vapidKey = "vapid_key"
    }

    /// The body parsed as JSON, when it is JSON.
    public var jsonBody: StandInJSON? {
        try? JSONDecoder().decode(StandInJSON.self, from: Data(body.utf8))
    }

    /// Web push: the decrypted payload parsed as JSON, when it is JSON.
    public var jsonPlaintext: StandInJSON? {
        plaintext.flatMap { try? JSONDecoder().decode(StandInJSON.self, from: Data($0.utf8)) }
    }
}

/// A web push subscription the stand-in made, as `PushSubscription.toJSON()` gives it: what a
/// browser posts to Rouse (`platform: web`) or registers as `pn-prid` (the endpoint).
public struct StandInWebPushSubscription: Decodable, Sendable, Equatable {
    public let endpoint: String
    public let keys: Keys

    /// `p256dh` (base64url P-256 point) and `auth` (base64url, 16 bytes).
    public struct Keys: Decodable, Sendable, Equatable {
        public let p256dh: String
        public let auth: String
    }

    /// The subscription's id: the last part of its endpoint (`/push/<id>`).
    public var id: String { String(endpoint.split(separator: "/").last ?? "") }

    /// The JSON object a browser posts: `{"endpoint", "expirationTime": null, "keys": {"p256dh", "auth"}}`.
    public var json: [String: Any] {
        ["endpoint": endpoint, "expirationTime": NSNull(), "keys": ["p256dh": keys.p256dh, "auth": keys.auth]]
    }
}

/// A JSON value from a stand-in's log (JWT claims, request bodies).
public enum StandInJSON: Decodable, Sendable, Equatable {
    case string(String)
    case number(Double)
    case bool(Bool)
    case null
    case array([StandInJSON])
    case object([String: StandInJSON])

    public init(from decoder: Decoder) throws {
        let container = try decoder.singleValueContainer()
        if container.decodeNil() {
            self = .null
        } else if let value = try? container.decode(Bool.self) {
            self = .bool(value)
        } else if let value = try? container.decode(Double.self) {
            self = .number(value)
        } else if let value = try? container.decode(String.self) {
            self = .string(value)
        } else if let value = try? container.decode([StandInJSON].self) {
            self = .array(value)
        } else {
            self = .object(try container.decode([String: StandInJSON].self))
        }
    }

    public var stringValue: String? {
        if case .string(let value) = self { return value }
        return nil
    }

    public var intValue: Int? {
        if case .number(let value) = self, value == value.rounded() { return Int(exactly: value) }
        return nil
    }

    public subscript(key: String) -> StandInJSON? {
        if case .object(let value) = self { return value[key] }
        return nil
    }
}
