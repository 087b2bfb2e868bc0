import Crypto
import Foundation
import Push
import Registrar
import RouseTestSupport
import RouseVocabulary
import Testing

/// Dead tokens and records kept in memory, as Storage keeps them in PostgreSQL.
actor MemoryPushStores: DeadTokenRecorder, PushRecordStore {
    private(set) var dead: [(family: PushProviderFamily, token: String, reason: String)] = []
    private(set) var records: [PushRecord] = []

    func markDead(_ token: PushTokenID, reason: String) async throws {
        dead.append((token.family, token.token, reason))
    }

    func record(_ record: PushRecord) async throws {
        records.append(record)
    }
}

/// An APNs app and the stand-ins that check it.
struct APNsFixture {
    static let teamID = "DEF123GHIJ"
    static let keyID = "ABC123DEFG"
    let key: APNsTestKey
    let production: PushStandIn
    let sandbox: PushStandIn?

    init(sandbox withSandbox: Bool = false, arguments: [String] = []) throws {
        key = try PushStandIn.makeAPNsKey()
        production = try PushStandIn.apns(keys: [Self.keyID: key.keyPath], teamID: Self.teamID, topics: ["com.example.app"], arguments: arguments)
        sandbox = withSandbox
            ? try PushStandIn.apns(keys: [Self.keyID: key.keyPath], teamID: Self.teamID, topics: ["com.example.app"], environment: .sandbox)
            : nil
    }

    func app(environment: APNsEnvironment? = nil) -> PushApp {
        PushApp(id: 7, credentials: .apns(credentials(environment: environment)))
    }

    func credentials(environment: APNsEnvironment? = nil) -> APNsCredentials {
        APNsCredentials(teamID: Self.teamID, keyID: Self.keyID, topic: "com.example.app", privateKeyPEM: key.privateKeyPEM, environment: environment)
    }

    func settings(timeout: Duration = .seconds(5)) throws -> PushSettings {
        PushSettings(
            apns: APNsEndpoints(production: production.baseURL, sandbox: sandbox?.baseURL ?? "https://127.0.0.1:1"),
            caFile: try caFile(), timeout: timeout)
    }

    /// Both stand-ins' CAs in one file (each stand-in makes its own CA).
    func caFile() throws -> String {
        guard let sandbox else { return production.caFile }
        let path = production.stateDirectory + "/both-cas.pem"
        let text = try String(contentsOfFile: production.caFile, encoding: .utf8) + String(contentsOfFile: sandbox.caFile, encoding: .utf8)
        try text.write(toFile: path, atomically: true, encoding: .utf8)
        return path
    }
}

/// An FCM app and its stand-in (token endpoint and messages:send).
struct FCMFixture {
    let standIn: PushStandIn
    let account: FCMServiceAccount

    init(revokeAfter: Int? = nil) throws {
        let original = try PushStandIn.makeFCMServiceAccount()
        defer { original.remove() }  // the stand-in reads it at start
        standIn = try PushStandIn.fcm(serviceAccountPath: original.path, revokeAfter: revokeAfter)
        account = try FCMServiceAccount(json: Array(FileManager.default.contents(atPath: standIn.serviceAccountFile!)!))
    }

    var app: PushApp { PushApp(id: 9, credentials: .fcm(account)) }
    var settings: PushSettings { PushSettings(fcmURL: standIn.baseURL, caFile: standIn.caFile, timeout: .seconds(5)) }
}

let call = CallPushContent(
    callID: "a84b4c76e66710@pc33.atlanta.com", callerNumber: "1001", callerName: "Alice", calleeNumber: "1002",
    calleeName: "Bob", ringTimeoutSeconds: 30, isVideo: true, timestamp: Date(timeIntervalSince1970: 1_700_000_000))
let callUUID = "3b0254fb-479a-5e7e-9c89-a6287808379a"

func apnsToken(_ prefix: String) -> String { prefix + String(repeating: "a", count: 64 - prefix.count) }

/// The scenarios of issue 4, each through the real libcurl HTTP/2 path to the Python stand-ins.
@Suite(.serialized)
struct PushScenarioTests {
    @Test func apnsAcceptsVoipRing() async throws {
        let fixture = try APNsFixture()
        let stores = MemoryPushStores()
        let service = PushService(settings: try fixture.settings(), apps: [fixture.app()], deadTokens: stores, records: stores)
        let token = apnsToken("0123")
        let expiry = Date(timeIntervalSince1970: 1_900_000_000)
        let outcome = await service.sendRing(
            call, to: PushChannel(provider: .apns, token: token, param: "ABCD1234.com.example.app.voip", kind: .voip), expiresAt: expiry, aor: "1002@example.com")
        #expect(outcome.isAccepted, "\(outcome)")
        let request = try #require(try fixture.production.requests().first)
        #expect(outcome.result == .accepted(providerID: request.headers["apns-id"]))
        #expect(request.method == "POST")
        #expect(request.path == "/3/device/\(token)")
        #expect(request.headers["apns-topic"] == "com.example.app.voip")
        #expect(request.headers["apns-push-type"] == "voip")
        #expect(request.headers["apns-priority"] == "10")
        #expect(request.headers["apns-expiration"] == "1900000000")
        #expect(request.headers["apns-collapse-id"] == callUUID)
        #expect(request.headers["authorization"]?.hasPrefix("bearer ") == true)
        #expect(request.jwtHeader?["alg"]?.stringValue == "ES256")
        #expect(request.jwtHeader?["kid"]?.stringValue == APNsFixture.keyID)
        #expect(request.jwtClaims?["iss"]?.stringValue == APNsFixture.teamID)
        #expect(request.verdictStatus == 200)
        #expect(request.body == #"{"aps":{},"event":"call.ring","call_id":"a84b4c76e66710@pc33.atlanta.com","uuid":"3b0254fb-479a-5e7e-9c89-a6287808379a","caller_number":"1001","caller_name":"Alice","callee_number":"1002","callee_name":"Bob","ring_timeout_secs":"30","is_video":"true","timestamp":"2023-11-14T22:13:20.000Z"}"#)
        let records = await stores.records
        #expect(records.count == 1)
        #expect(records.first?.outcome == "accepted")
        #expect(records.first?.aor == "1002@example.com")
        #expect(records.first?.tokenShort == "0123aaaa…")
    }

    @Test func apnsCancelIsBackgroundPushToRegularToken() async throws {
        let fixture = try APNsFixture()
        let service = PushService(settings: try fixture.settings(), apps: [fixture.app()])
        let token = apnsToken("0124")
        let outcome = await service.sendCancel(
            call, event: .ended, reason: "answered elsewhere", to: PushChannel(provider: .apns, token: token, param: nil, kind: .remote),
            expiresAt: Date(timeIntervalSince1970: 1_900_000_000))
        #expect(outcome.isAccepted, "\(outcome)")
        let request = try #require(try fixture.production.requests().first)
        #expect(request.headers["apns-topic"] == "com.example.app")
        #expect(request.headers["apns-push-type"] == "background")
        #expect(request.headers["apns-priority"] == "5")
        #expect(request.headers["apns-collapse-id"] == callUUID)
        #expect(request.notes.isEmpty, "\(request.notes)")
        #expect(request.body == #"{"aps":{"content-available":1},"event":"call.ended","call_id":"a84b4c76e66710@pc33.atlanta.com","uuid":"3b0254fb-479a-5e7e-9c89-a6287808379a","reason":"answered elsewhere","timestamp":"2023-11-14T22:13:20.000Z"}"#)
        let refused = await service.sendCancel(call, reason: "x", to: PushChannel(provider: .apns, token: token, param: nil, kind: .voip), expiresAt: Date())
        #expect(refused.word == "failed")
    }

    @Test func apnsTestPushIsARingMarkedTest() async throws {
        let fixture = try APNsFixture()
        let service = PushService(settings: try fixture.settings(), apps: [])
        let outcome = await service.sendTest(app: fixture.app(), token: apnsToken("0125").uppercased())
        #expect(outcome.isAccepted, "\(outcome)")
        let request = try #require(try fixture.production.requests().first)
        #expect(request.path == "/3/device/\(apnsToken("0125"))")
        #expect(request.headers["apns-push-type"] == "voip")
        #expect(request.jsonBody?["test"]?.stringValue == "true")
        #expect(request.jsonBody?["event"]?.stringValue == "call.ring")
    }

    @Test func apnsUnregisteredMarksTokenDead() async throws {
        let fixture = try APNsFixture()
        let stores = MemoryPushStores()
        let service = PushService(settings: try fixture.settings(), apps: [fixture.app()], deadTokens: stores, records: stores)
        let token = apnsToken("dead")
        let outcome = await service.sendRing(call, to: PushChannel(provider: .apns, token: token, param: nil, kind: .voip), expiresAt: Date().addingTimeInterval(30))
        #expect(outcome.result == .refused(status: 410, reason: "Unregistered", explanation: "the app was uninstalled or its token replaced: the token is dead"))
        #expect(outcome.isDeadToken)
        let dead = await stores.dead
        #expect(dead.count == 1)
        #expect(dead.first?.family == .apns && dead.first?.token == token && dead.first?.reason == "Unregistered")
        #expect(await stores.records.first?.outcome == "refused")
        #expect(await stores.records.first?.status == 410)
    }

    @Test func apnsBadDeviceTokenExplainsEnvironment() async throws {
        let fixture = try APNsFixture(sandbox: true)
        let stores = MemoryPushStores()
        // A development build's token (sandbox) sent to an app set to production.
        let restricted = PushService(settings: try fixture.settings(), apps: [fixture.app(environment: .production)], deadTokens: stores)
        let sandboxToken = apnsToken("5a0d")
        let outcome = await restricted.sendRing(call, to: PushChannel(provider: .apns, token: sandboxToken, param: nil, kind: .voip), expiresAt: Date().addingTimeInterval(30))
        guard case .refused(400, "BadDeviceToken", let explanation) = outcome.result else {
            Issue.record("expected BadDeviceToken, got \(outcome)")
            return
        }
        #expect(explanation.hasPrefix("the token belongs to a development build; this app is set to production"), "\(explanation)")
        #expect(explanation.contains("sandbox host accepted it"), "\(explanation)")
        #expect(!outcome.isDeadToken)
        // A token neither host knows is dead.
        let unknown = apnsToken("badd")
        let dead = await restricted.sendRing(call, to: PushChannel(provider: .apns, token: unknown, param: nil, kind: .voip), expiresAt: Date().addingTimeInterval(30))
        #expect(dead.isDeadToken, "\(dead)")
        #expect(await stores.dead.map(\.token) == [unknown])
        // A production token a device registered as apns.dev.
        let open = PushService(settings: try fixture.settings(), apps: [fixture.app()])
        let reverse = await open.sendRing(call, to: PushChannel(provider: .apnsSandbox, token: apnsToken("9d0d"), param: nil, kind: .voip), expiresAt: Date().addingTimeInterval(30))
        #expect(reverse.explanation.contains("belongs to a production"), "\(reverse)")
        #expect(try fixture.sandbox!.requests().count == 3)
    }

    @Test func fcmUnregisteredMarksTokenDead() async throws {
        let fixture = try FCMFixture()
        let stores = MemoryPushStores()
        let service = PushService(settings: fixture.settings, apps: [fixture.app], deadTokens: stores, records: stores)
        let outcome = await service.sendRing(call, to: PushChannel(provider: .fcm, token: "unregistered-token-1", param: nil, kind: .standard), expiresAt: Date().addingTimeInterval(30))
        #expect(outcome.result == .refused(status: 404, reason: "UNREGISTERED", explanation: "the app was uninstalled or its token replaced: the token is dead"))
        #expect(await stores.dead.map(\.token) == ["unregistered-token-1"])
        #expect(await stores.dead.first?.family == .fcm)
        let mismatch = await service.sendRing(call, to: PushChannel(provider: .fcm, token: "mismatch-token", param: nil, kind: .standard), expiresAt: Date().addingTimeInterval(30))
        #expect(mismatch.isDeadToken)
    }

    @Test func fcmRingAndCancelGoldenRequests() async throws {
        let fixture = try FCMFixture()
        let service = PushService(settings: fixture.settings, apps: [fixture.app])
        let channel = PushChannel(provider: .fcm, token: "device-token-1", param: "rouse-test", kind: .standard)
        let ring = await service.sendRing(call, to: channel, expiresAt: Date().addingTimeInterval(20))
        #expect(ring.isAccepted, "\(ring)")
        if case .accepted(let id) = ring.result { #expect(id?.hasPrefix("projects/rouse-test/messages/") == true) }
        let cancel = await service.sendCancel(call, reason: "caller hung up", to: channel, expiresAt: Date().addingTimeInterval(20))
        #expect(cancel.isAccepted, "\(cancel)")
        let requests = try fixture.standIn.requests()
        #expect(requests.map(\.path) == ["/token", "/v1/projects/rouse-test/messages:send", "/v1/projects/rouse-test/messages:send"])
        let token = requests[0]
        #expect(token.headers["content-type"] == "application/x-www-form-urlencoded")
        #expect(token.jwtHeader?["alg"]?.stringValue == "RS256")
        #expect(token.jwtClaims?["scope"]?.stringValue == "https://www.googleapis.com/auth/firebase.messaging")
        #expect(token.jwtClaims?["aud"]?.stringValue == fixture.standIn.tokenURI)
        let ringBody = try #require(requests[1].jsonBody?["message"])
        #expect(requests[1].headers["authorization"]?.hasPrefix("Bearer ya29.") == true)
        #expect(ringBody["notification"] == nil)
        #expect(ringBody["token"]?.stringValue == "device-token-1")
        #expect(ringBody["android"]?["priority"]?.stringValue == "high")
        #expect(ringBody["android"]?["collapse_key"]?.stringValue == callUUID)
        #expect(ringBody["android"]?["ttl"]?.stringValue.map { ["20s", "19s", "21s"].contains($0) } == true)
        #expect(ringBody["data"] == .object([
            "event": .string("call.ring"), "call_id": .string(call.callID), "uuid": .string(callUUID), "caller_number": .string("1001"),
            "caller_name": .string("Alice"), "callee_number": .string("1002"), "callee_name": .string("Bob"),
            "ring_timeout_secs": .string("30"), "is_video": .string("true"), "timestamp": .string("2023-11-14T22:13:20.000Z"),
        ]))
        let cancelBody = try #require(requests[2].jsonBody?["message"])
        #expect(cancelBody["data"]?["event"]?.stringValue == "call.canceled")
        #expect(cancelBody["data"]?["reason"]?.stringValue == "caller hung up")
        #expect(cancelBody["android"]?["collapse_key"]?.stringValue == callUUID)
        #expect(requests.allSatisfy { $0.notes.isEmpty }, "\(requests.map(\.notes))")
    }

    /// docs/push.md "Delivery policy", as the FCM stand-in logs what was sent: a ring and its
    /// cancel are high priority with `direct_boot_ok` (the app's setting, on by default); a
    /// missed-call notice and a binding refresh are normal priority, without it.
    @Test func fcmDeliveryPolicyByMessageKind() async throws {
        let fixture = try FCMFixture()
        let service = PushService(settings: fixture.settings, apps: [fixture.app])
        let channel = PushChannel(provider: .fcm, token: "policy-token-1", param: nil, kind: .standard)
        #expect(await service.sendRing(call, to: channel, expiresAt: Date().addingTimeInterval(20)).isAccepted)
        #expect(await service.sendCancel(call, reason: "caller hung up", to: channel, expiresAt: Date().addingTimeInterval(20)).isAccepted)
        #expect(await service.sendMissed(call, reason: "no answer", to: channel).isAccepted)
        #expect(await service.sendBindingRefresh(aor: "1002@example.com", expiresAt: Date().addingTimeInterval(300), to: channel).isAccepted)
        var withoutDirectBoot = fixture.app
        withoutDirectBoot.directBootOK = false
        service.replaceApps([withoutDirectBoot])
        #expect(await service.sendRing(call, to: channel, expiresAt: Date().addingTimeInterval(20)).isAccepted)
        let sent = try fixture.standIn.requests().filter { $0.path.hasSuffix("messages:send") }.compactMap { $0.jsonBody?["message"] }
        #expect(sent.map { $0["data"]?["event"]?.stringValue ?? "" } == ["call.ring", "call.canceled", "call.missed", "binding.refresh", "call.ring"])
        #expect(sent.map { $0["android"]?["priority"]?.stringValue ?? "" } == ["high", "high", "normal", "normal", "high"])
        #expect(sent.map { $0["android"]?["direct_boot_ok"] } == [.bool(true), .bool(true), nil, nil, nil])
    }

    @Test func fcmAccessTokenRefreshedOnce() async throws {
        let fixture = try FCMFixture(revokeAfter: 2)
        let client = try FCMClient(account: fixture.account, baseURL: fixture.standIn.baseURL, caFile: fixture.standIn.caFile, timeout: .seconds(5))
        let body = { (token: String) in PushPayload.ring(call).fcmBody(token: token, ttlSeconds: 30, collapseKey: callUUID) }
        #expect(await client.send(body("t1")).isAccepted)
        #expect(await client.send(body("t2")).isAccepted)  // the second message revokes every token issued so far
        #expect(await client.tokenFetches == 1)
        let third = await client.send(body("t3"))
        #expect(third.isAccepted, "\(third)")
        #expect(await client.tokenFetches == 2)
        #expect(await client.send(body("t4")).isAccepted)
        #expect(await client.tokenFetches == 2)
        let statuses = try fixture.standIn.requests().map { "\($0.path == "/token" ? "token" : "send") \($0.verdictStatus ?? 0)" }
        #expect(statuses == ["token 200", "send 200", "send 200", "send 401", "token 200", "send 200", "send 200"])
    }

    @Test func pushTimesOutWithinDeadline() async throws {
        let fixture = try APNsFixture()
        let service = PushService(settings: try fixture.settings(timeout: .milliseconds(800)), apps: [fixture.app()])
        let started = ContinuousClock.now
        let outcome = await service.sendRing(call, to: PushChannel(provider: .apns, token: apnsToken("510e"), param: nil, kind: .voip), expiresAt: Date().addingTimeInterval(30))
        let elapsed = ContinuousClock.now - started
        guard case .failed(.timeout, _) = outcome.result else {
            Issue.record("expected a timeout, got \(outcome)")
            return
        }
        // The stand-in never answers and the ring lives 30 s: only the 0.8 s push timeout can end the wait
        // this early. The upper bound is loose on purpose (a loaded CI machine under TSan is slow to connect).
        #expect(elapsed >= .milliseconds(700) && elapsed < .seconds(20), "\(elapsed)")
        #expect(outcome.description.contains("failed (timeout)"), "\(outcome)")
        // The connection still serves the next push.
        #expect(await service.sendRing(call, to: PushChannel(provider: .apns, token: apnsToken("0126"), param: nil, kind: .voip), expiresAt: Date().addingTimeInterval(30)).isAccepted)
        let unreachable = PushService(settings: PushSettings(apns: APNsEndpoints(production: "https://127.0.0.1:1"), timeout: .seconds(2)), apps: [fixture.app()])
        let refused = await unreachable.sendRing(call, to: PushChannel(provider: .apns, token: apnsToken("0127"), param: nil, kind: .voip), expiresAt: Date())
        guard case .failed(.connect, _) = refused.result else {
            Issue.record("expected a connect failure, got \(refused)")
            return
        }
    }

    @Test func connectionDropReconnects() async throws {
        let fixture = try APNsFixture()
        let client = try APNsClient(credentials: fixture.credentials(), endpoints: APNsEndpoints(production: fixture.production.baseURL), caFile: fixture.production.caFile, timeout: .seconds(5))
        let ring = { (token: String) in APNsRequest.ring(token: token, credentials: fixture.credentials(), payload: .ring(call), expiresAt: Date().addingTimeInterval(30)) }
        #expect(await client.send(ring(apnsToken("0201")), environment: .production).isAccepted)
        #expect(await client.send(ring(apnsToken("0202")), environment: .production).isAccepted)
        // The service goes away, dropping the connection, and comes back on the same port.
        fixture.production.stop(keepingState: true)
        let restarted = try PushStandIn.apns(
            keys: [APNsFixture.keyID: fixture.key.keyPath], teamID: APNsFixture.teamID, topics: ["com.example.app"],
            arguments: ["--port", String(fixture.production.port)], stateFolder: fixture.production.stateFolder)
        let after = await client.send(ring(apnsToken("0203")), environment: .production)
        #expect(after.isAccepted, "\(after)")
        let requests = try restarted.requests()
        // One log for both processes: two pushes on the first process's connection, one on the new process's.
        #expect(requests.map(\.path) == ["0201", "0202", "0203"].map { "/3/device/\(apnsToken($0))" })
        #expect(requests.map(\.verdictStatus) == [200, 200, 200])
        #expect(client.jwtGenerations == 1)
    }

    @Test func jwtReusedAcrossPushes() async throws {
        let fixture = try APNsFixture(arguments: ["--provider-token-lifetime", "2"])
        let client = try APNsClient(credentials: fixture.credentials(), endpoints: APNsEndpoints(production: fixture.production.baseURL), caFile: fixture.production.caFile, timeout: .seconds(5))
        let ring = { (token: String) in APNsRequest.ring(token: token, credentials: fixture.credentials(), payload: .ring(call), expiresAt: Date().addingTimeInterval(30)) }
        let requestsToSend = (0..<8).map { ring(apnsToken(String(format: "%04x", 0x300 + $0))) }
        let outcomes = await withTaskGroup(of: PushOutcome.self) { group in
            for request in requestsToSend { group.addTask { await client.send(request, environment: .production) } }
            return await group.reduce(into: [PushOutcome]()) { $0.append($1) }
        }
        #expect(outcomes.allSatisfy { $0.isAccepted }, "\(outcomes)")
        var requests = try fixture.production.requests()
        #expect(Set(requests.compactMap { $0.headers["authorization"] }).count == 1)
        #expect(Set(requests.map(\.connection)).count == 1, "multiplexed on one connection")
        #expect(client.jwtGenerations == 1)
        // Apple calls the JWT expired: one new JWT, the push sent again and accepted.
        try await Task.sleep(for: .milliseconds(3200))
        let late = await client.send(ring(apnsToken("0399")), environment: .production)
        #expect(late.isAccepted, "\(late)")
        #expect(client.jwtGenerations == 2)
        requests = try fixture.production.requests()
        #expect(requests.suffix(2).map(\.verdictReason) == ["ExpiredProviderToken", "OK"])
    }
}
