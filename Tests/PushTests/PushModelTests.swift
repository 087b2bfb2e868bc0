import Crypto
import Foundation
import Push
import Registrar
import RouseVocabulary
import XCTest

/// Payloads, app validation, app selection and outcome words, without the network.
final class PushModelTests: XCTestCase {
    static let p8 = SigningKey.generateP256().privateKeyPEM()
    static let rsa = SigningKey.generateRSA().privateKeyPEM()

    static func apnsApp(id: Int64 = 1, topic: String = "com.example.app", param: String = "", environment: APNsEnvironment? = nil) -> PushApp {
        PushApp(id: id, credentials: .apns(APNsCredentials(teamID: "DEF123GHIJ", keyID: "ABC123DEFG", topic: topic, privateKeyPEM: p8, environment: environment)), param: param)
    }

    static func fcmApp(id: Int64 = 2, project: String = "rouse-test", param: String = "") -> PushApp {
        PushApp(id: id, credentials: .fcm(FCMServiceAccount(projectID: project, clientEmail: "a@\(project).iam.gserviceaccount.com", privateKeyPEM: rsa, tokenURI: "https://oauth2.googleapis.com/token")), param: param)
    }

    static let call = CallPushContent(
        callID: "a84b4c76e66710@pc33.atlanta.com", callerNumber: "1001", callerName: "Alice \"A\"", calleeNumber: "1002",
        calleeName: "Bob", ringTimeoutSeconds: 30, isVideo: false, timestamp: Date(timeIntervalSince1970: 1_700_000_000.25))

    func testCallUUIDIsVersion5OfTheCallIDInTheDocumentedNamespace() {
        // Python: uuid.uuid5(uuid.UUID("d46af99e-2b71-4669-a0fd-4dcc7bddc9df"), "a84b4c76e66710@pc33.atlanta.com")
        XCTAssertEqual(PushPayload.uuid(forCallID: "a84b4c76e66710@pc33.atlanta.com"), "3b0254fb-479a-5e7e-9c89-a6287808379a")
        XCTAssertEqual(PushPayload.uuidNamespace, "d46af99e-2b71-4669-a0fd-4dcc7bddc9df")
    }

    func testAPNsRingBodyIsVoIPShapeWithStringValues() {
        let body = String(decoding: PushPayload.ring(Self.call).apnsBody(background: false), as: UTF8.self)
        XCTAssertEqual(body, #"{"aps":{},"event":"call.ring","call_id":"a84b4c76e66710@pc33.atlanta.com","uuid":"3b0254fb-479a-5e7e-9c89-a6287808379a","caller_number":"1001","caller_name":"Alice \"A\"","callee_number":"1002","callee_name":"Bob","ring_timeout_secs":"30","is_video":"false","timestamp":"2023-11-14T22:13:20.250Z"}"#)
    }

    func testAPNsCancelIsBackgroundToTheRegularTopic() throws {
        let payload = PushPayload.cancel(Self.call, event: .canceled, reason: "answered elsewhere")
        let request = APNsRequest.cancel(token: "ab", credentials: APNsCredentials(teamID: "DEF123GHIJ", keyID: "ABC123DEFG", topic: "com.example.app.voip", privateKeyPEM: ""), payload: payload, expiresAt: Date(timeIntervalSince1970: 1_700_000_060))
        XCTAssertEqual(request.topic, "com.example.app")
        XCTAssertEqual(request.pushType, .background)
        XCTAssertEqual(request.priority, 5)
        XCTAssertEqual(request.expiration, 1_700_000_060)
        XCTAssertEqual(request.collapseID, "3b0254fb-479a-5e7e-9c89-a6287808379a")
        XCTAssertEqual(String(decoding: request.body, as: UTF8.self), #"{"aps":{"content-available":1},"event":"call.canceled","call_id":"a84b4c76e66710@pc33.atlanta.com","uuid":"3b0254fb-479a-5e7e-9c89-a6287808379a","reason":"answered elsewhere","timestamp":"2023-11-14T22:13:20.250Z"}"#)
    }

    func testFCMBodyIsDataOnlyWithHighPriorityTTLAndCollapseKey() throws {
        let body = PushPayload.ring(Self.call, test: true).fcmBody(token: "tok", ttlSeconds: 30, collapseKey: Self.call.uuid)
        let object = try XCTUnwrap(JSONSerialization.jsonObject(with: Data(body)) as? [String: Any])
        let message = try XCTUnwrap(object["message"] as? [String: Any])
        XCTAssertNil(message["notification"])
        XCTAssertEqual(message["token"] as? String, "tok")
        let data = try XCTUnwrap(message["data"] as? [String: Any])
        XCTAssertTrue(data.values.allSatisfy { $0 is String }, "\(data)")
        XCTAssertEqual(data["test"] as? String, "true")
        XCTAssertEqual(data["ring_timeout_secs"] as? String, "30")
        XCTAssertEqual(message["android"] as? [String: String], ["priority": "high", "ttl": "30s", "collapse_key": Self.call.uuid])
    }

    func testAPNsValidationNamesTheFieldAndSaysWhichTopicIsDerived() throws {
        XCTAssertEqual(try Self.apnsApp().validate().first, "VoIP topic com.example.app.voip derived from bundle id com.example.app (ring pushes go there; cancel pushes to com.example.app)")
        XCTAssertTrue(try Self.apnsApp(topic: "com.example.app.voip").validate().first!.contains("ring pushes go to topic com.example.app.voip"))
        var bad = Self.apnsApp()
        bad.credentials = .apns(APNsCredentials(teamID: "def123", keyID: "ABC123DEFG", topic: "com.example.app", privateKeyPEM: Self.p8))
        XCTAssertThrowsError(try bad.validate()) { XCTAssertEqual(($0 as? PushAppError)?.field, "team_id") }
        bad.credentials = .apns(APNsCredentials(teamID: "DEF123GHIJ", keyID: "ABC123DEF!", topic: "com.example.app", privateKeyPEM: Self.p8))
        XCTAssertThrowsError(try bad.validate()) { XCTAssertEqual(($0 as? PushAppError)?.field, "key_id") }
        bad.credentials = .apns(APNsCredentials(teamID: "DEF123GHIJ", keyID: "ABC123DEFG", topic: "app", privateKeyPEM: Self.p8))
        XCTAssertThrowsError(try bad.validate()) { XCTAssertEqual(($0 as? PushAppError)?.field, "topic") }
        bad.credentials = .apns(APNsCredentials(teamID: "DEF123GHIJ", keyID: "ABC123DEFG", topic: "com.example.app", privateKeyPEM: Self.rsa))
        XCTAssertThrowsError(try bad.validate()) { error in
            XCTAssertEqual((error as? PushAppError)?.field, "key")
            XCTAssertTrue("\(error)".contains("P-256"), "\(error)")
            XCTAssertFalse("\(error)".contains("MII"), "\(error)")
        }
    }

    func testFCMValidationNeedsAnRSAKeyAndServiceAccountFields() throws {
        XCTAssertNoThrow(try Self.fcmApp().validate())
        var bad = Self.fcmApp()
        bad.credentials = .fcm(FCMServiceAccount(projectID: "p", clientEmail: "a@b", privateKeyPEM: Self.p8, tokenURI: "https://x/token"))
        XCTAssertThrowsError(try bad.validate()) { XCTAssertEqual(($0 as? PushAppError)?.field, "private_key") }
        XCTAssertThrowsError(try FCMServiceAccount(json: Array(#"{"type":"service_account","project_id":"p"}"#.utf8))) { error in
            XCTAssertEqual((error as? PushAppError)?.field, "client_email")
        }
    }

    func testKeysNeverAppearInDescriptions() {
        for app in [Self.apnsApp(), Self.fcmApp()] {
            for text in ["\(app)", String(reflecting: app), "\(app.credentials)"] {
                XCTAssertFalse(text.contains("PRIVATE KEY"), text)
                XCTAssertFalse(text.contains("MI"), text)
            }
        }
        if case .apns(let apns) = Self.apnsApp().credentials { XCTAssertFalse(String(reflecting: apns).contains("PRIVATE")) }
    }

    func testSelectorStripsLinphoneSuffixesAndTeamIDThenFallsBackToDefault() {
        let voip = Self.apnsApp(id: 1, topic: "com.example.voipapp", param: "com.example.voipapp.voip")
        let other = Self.apnsApp(id: 2, topic: "org.other.app", param: "TEAM123456.org.other.app")
        let defaultApp = Self.apnsApp(id: 3, topic: "com.default.app")
        let firebase = Self.fcmApp(id: 4, project: "proj-a", param: "123456789")
        let defaultFCM = Self.fcmApp(id: 5, project: "proj-b")
        let selector = PushAppSelector(apps: [voip, other, defaultApp, firebase, defaultFCM])
        func app(_ provider: PushProvider, _ param: String?) -> Int64? { selector.app(provider: provider, param: param)?.id }
        XCTAssertEqual(app(.apns, "ABCD1234.com.example.voipapp.remote&voip"), 1)
        XCTAssertEqual(app(.apns, "DEF123GHIJ.com.example.voipapp.voip"), 1)
        XCTAssertEqual(app(.apnsSandbox, "com.example.voipapp"), 1)
        XCTAssertEqual(app(.apns, "TEAM123456.org.other.app"), 2)
        XCTAssertEqual(app(.apns, "ZZZ.com.unknown.voip"), 3)
        XCTAssertEqual(app(.apns, nil), 3)
        XCTAssertEqual(app(.fcm, "123456789"), 4)
        XCTAssertEqual(app(.fcm, "proj-a"), 4)
        XCTAssertEqual(app(.fcm, "elsewhere"), 5)
        XCTAssertNil(PushAppSelector(apps: [firebase]).app(provider: .apns, param: "com.example.voip"))
        XCTAssertNil(PushAppSelector(apps: [other]).app(provider: .apns, param: "com.example.voip"))
    }

    func testNoAppOutcomeSaysSoInThoseWords() async {
        let service = PushService(settings: PushSettings(), apps: [])
        let outcome = await service.sendRing(Self.call, to: PushChannel(provider: .apns, token: "ab", param: "com.example.voip", kind: .voip), expiresAt: Date())
        XCTAssertEqual(outcome.description, "failed: no push app for apns / com.example.voip")
        XCTAssertEqual(outcome.word, "failed")
    }

    func testDeadTokenRulesFollowProtocolTables() {
        XCTAssertTrue(APNsReason.isDead(status: 410, reason: "Unregistered"))
        XCTAssertTrue(APNsReason.isDead(status: 400, reason: "DeviceTokenNotForTopic"))
        XCTAssertFalse(APNsReason.isDead(status: 400, reason: "BadDeviceToken"))
        XCTAssertFalse(APNsReason.isDead(status: 403, reason: "ExpiredProviderToken"))
        XCTAssertTrue(FCMReason.isDead(FCMError(status: 404, code: "UNREGISTERED")))
        XCTAssertTrue(FCMReason.isDead(FCMError(status: 403, code: "SENDER_ID_MISMATCH")))
        // INVALID_ARGUMENT is dead only when it is about the token (Google's "FCM error codes").
        XCTAssertTrue(FCMReason.isDead(FCMError(status: 400, code: "INVALID_ARGUMENT", message: "The registration token is not a valid FCM registration token")))
        XCTAssertTrue(FCMReason.isDead(FCMError(status: 400, code: "INVALID_ARGUMENT", message: "Invalid value", fields: ["message.token"])))
        XCTAssertFalse(FCMReason.isDead(FCMError(status: 400, code: "INVALID_ARGUMENT", message: "Invalid value at 'message.data[0].value' (TYPE_STRING), 12", fields: ["message.data[0].value"])))
        XCTAssertFalse(FCMReason.isDead(FCMError(status: 400, code: "INVALID_ARGUMENT", message: "Message is too big")))
        XCTAssertFalse(FCMReason.isDead(FCMError(status: 400, code: "INVALID_ARGUMENT")))
        XCTAssertEqual(
            APNsReason.explanation(status: 400, reason: "BadDeviceToken", environment: .production, appRestricted: true),
            "the token belongs to a development build; this app is set to production")
    }
}
