// libFuzzer harness for the JSON bodies of the HTTP API: the posting endpoint's POST and DELETE
// bodies and the admin API's bodies (organisation, extension, password, push app, test push, outbound
// route, national patterns, class of service).
// Build and run as SIPParserFuzz (scripts/fuzz.sh): the target exists only when ROUSE_FUZZ=1.
//   ROUSE_FUZZ=1 swift build --scratch-path /tmp/rouse-fuzz -c release --product HTTPBodyFuzz \
//     --sanitize=fuzzer -Xswiftc -parse-as-library
//   SWIFT_BACKTRACE=enable=no /tmp/rouse-fuzz/release/HTTPBodyFuzz -max_total_time=60 Tests/Fuzz/http-body-corpus
// It needs neither PostgreSQL nor the network: the readers are pure functions.
import Crypto
import Foundation
import HTTPAPI
import HTTPServer
import Push
import Registrar
import RouseVocabulary

/// Gives the input to every body reader. A refusal must be a 400 in the API's error shape (never
/// the 503 an unexpected error would become); an accepted posting must hold a token the endpoint's
/// rules allow; a push app read from a body is validated as storing it would.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    let body = Data(UnsafeBufferPointer(start: data, count: size))

    switch PushRegistrationAPI.parsePostBody(body) {
    case .success(let posting):
        let token = posting.channel.token
        guard !token.isEmpty, token.utf8.count <= 4096, token.unicodeScalars.allSatisfy({ $0.value > 0x20 && $0.value < 0x7F }) else {
            fatalError("a posting with a token the rules refuse was accepted")
        }
        if posting.channel.provider.family == .apns, Hex.decode(token) == nil { fatalError("an iOS token that is not hex was accepted") }
    case .failure(let refusal):
        checkRefusal(refusal.response)
    }
    switch PushRegistrationAPI.parseDeleteBody(body) {
    case .success(let removal):
        guard !removal.token.isEmpty else { fatalError("a removal without a token was accepted") }
    case .failure(let refusal):
        checkRefusal(refusal.response)
    }

    admin { _ = try AdminAPI.parseOrganisationBody(body) }
    admin { _ = try AdminAPI.parseExtensionBody(body) }
    admin { _ = try AdminAPI.parsePasswordBody(body) }
    admin { _ = try AdminAPI.parseDisplayNameBody(body) }
    admin { _ = try AdminAPI.parseTestPushBody(body) }
    admin { _ = try AdminAPI.parseRouteBody(body, organisation: "example.com") }
    admin { _ = try AdminAPI.parseNationalPatternsBody(body) }
    admin { _ = try AdminAPI.parseClassOfServiceBody(body) }
    admin {
        let app = try AdminAPI.parsePushAppBody(body)
        _ = try app.validate()
        _ = (app.description, app.kind)
    }
    return 0
}

/// Runs one admin body reader; its refusal must be a 400.
private func admin(_ read: () throws -> Void) {
    do {
        try read()
    } catch {
        checkRefusal(AdminAPI.response(for: error))
    }
}

private func checkRefusal(_ response: HTTPResponse) {
    guard response.status == 400 else { fatalError("a body was refused with \(response.status), not 400") }
    guard let object = try? JSONSerialization.jsonObject(with: response.body) as? [String: Any], object["error"] != nil else {
        fatalError("a refusal is not in the error shape: \(String(decoding: response.body, as: UTF8.self))")
    }
}
