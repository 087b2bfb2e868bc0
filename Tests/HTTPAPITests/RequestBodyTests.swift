import Foundation
import HTTPAPI
import HTTPServer
import RouseVocabulary
import XCTest

/// The request bodies as the endpoints read them, without a server: absent, `null`, a wrong type
/// and a bad value are told apart, and each refusal names its field.
final class RequestBodyTests: XCTestCase {
    /// The 400 a `POST /api/v1/push/register` body gets, as text; nil when it is accepted.
    func postRefusal(_ json: String) -> String? {
        guard case .failure(let failure) = PushRegistrationAPI.parsePostBody(Data(json.utf8)) else { return nil }
        XCTAssertEqual(failure.response.status, 400)
        return String(decoding: failure.response.body, as: UTF8.self)
    }

    func testAPostingTellsAbsentNullAndWrongTypesApart() throws {
        let alice = #""sipUser":"1001@example.com""#
        XCTAssertNil(postRefusal(#"{"token":"fcm-1",\#(alice),"param":null,"deviceId":null}"#), "null is no param and no device id")
        guard case .success(let posting) = PushRegistrationAPI.parsePostBody(Data(#"{"token":"fcm-1",\#(alice),"deviceId":"d1"}"#.utf8)) else {
            return XCTFail("refused")
        }
        XCTAssertEqual(posting.deviceID, "d1")
        XCTAssertEqual(posting.channel.provider, .fcm, "no platform: android")
        XCTAssertEqual(
            postRefusal(#"{"token":"fcm-1",\#(alice),"platform":null}"#),
            #"{"error":{"code":"invalid_field","field":"platform","message":"platform must be android, ios, ios.dev or web"}}"# + "\n",
            "a null platform is a bad platform, not the default")
        XCTAssertEqual(
            postRefusal(#"{"token":5,\#(alice)}"#),
            #"{"error":{"code":"invalid_field","field":"token","message":"token is required: the device's push token"}}"# + "\n")
        XCTAssertEqual(
            postRefusal(#"{"token":"fcm-1",\#(alice),"subscription":null}"#),
            #"{"error":{"code":"invalid_field","field":"platform","message":"a subscription is posted with platform web"}}"# + "\n")
        XCTAssertEqual(
            postRefusal(#"{"token":"fcm-1",\#(alice),"deviceId":7}"#),
            #"{"error":{"code":"invalid_field","field":"deviceId","message":"deviceId must be a non-empty string of at most 255 bytes"}}"# + "\n")
        for notAnObject in ["[1]", "5", "\"text\"", "{", ""] {
            XCTAssertEqual(
                postRefusal(notAnObject), #"{"error":{"code":"invalid_json","message":"the body must be a JSON object"}}"# + "\n", notAnObject)
        }
    }

    func testAWebSubscriptionNamesTheNestedFieldAtFault() {
        let head = #"{"platform":"web","sipUser":"1001@example.com","subscription":"#
        XCTAssertEqual(
            postRefusal(head + #"{"endpoint":"https://push.example.net/x","keys":"none"}}"#),
            #"{"error":{"code":"invalid_field","field":"subscription.keys","message":"subscription.keys must hold p256dh and auth"}}"# + "\n")
        XCTAssertEqual(
            postRefusal(head + #"{"endpoint":5}}"#).flatMap { $0.contains(#""field":"subscription.endpoint""#) ? "named" : $0 }, "named")
    }

    func testAdminBodiesSayRequiredForNullAndMustBeAStringForAnotherType() throws {
        func refusal(_ json: String) -> String {
            do {
                _ = try AdminAPI.parseTestPushBody(Data(json.utf8))
                return "accepted"
            } catch {
                return String(decoding: AdminAPI.response(for: error).body, as: UTF8.self)
            }
        }
        XCTAssertEqual(refusal(#"{"token":null}"#), #"{"error":{"code":"invalid_field","field":"token","message":"token is required"}}"# + "\n")
        XCTAssertEqual(refusal(#"{"token":5}"#), #"{"error":{"code":"invalid_field","field":"token","message":"token must be a string"}}"# + "\n")
        XCTAssertEqual(refusal(#"{"token":"abc","provider":null}"#), "accepted", "a null provider is none named")
        XCTAssertEqual(refusal("[]"), #"{"error":{"code":"invalid_json","message":"the body must be a JSON object"}}"# + "\n")
        XCTAssertEqual(try AdminAPI.parseOrganisationBody(Data(#"{"domain":"example.org","extra":[1,{"a":true}]}"#.utf8)), "example.org",
                       "other fields are ignored")
    }
}
