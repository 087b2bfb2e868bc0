// libFuzzer harness for the RFC 8599 / Linphone push parameters of a Contact.
// Build and run as SIPParserFuzz (scripts/fuzz.sh): the target exists only when ROUSE_FUZZ=1.
//   ROUSE_FUZZ=1 swift build --scratch-path /tmp/rouse-fuzz -c release --product PushParametersFuzz \
//     --sanitize=fuzzer -Xswiftc -parse-as-library
//   SWIFT_BACKTRACE=enable=no /tmp/rouse-fuzz/release/PushParametersFuzz -max_total_time=60 \
//     Tests/Fuzz/push-parameters-corpus
import Registrar
import RouseVocabulary
import SIPMessage

/// Reads the input as one Contact value (as the registrar does) and its push parameters. Every
/// channel found must have a token, and the shortened token shown in logs and pages must never be
/// the whole token.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    let text = String(decoding: UnsafeBufferPointer(start: data, count: size), as: UTF8.self)
    guard case .address(let address)? = try? SIPContact(parsing: text) else { return 0 }
    let parameters: PushParameters?
    do {
        parameters = try PushParameters.parse(address)
    } catch {
        _ = error.description
        return 0
    }
    guard let parameters else { return 0 }
    if parameters.isCapabilityQuery { return 0 }
    for channel in parameters.channels {
        guard !channel.token.isEmpty else { fatalError("empty token from \(text)") }
        guard channel.provider == parameters.provider else { fatalError("channel provider differs from \(text)") }
        let shortened = Binding.shortenedToken(channel.token)
        // Byte search, not Foundation's `contains`: that traps on some non-UTF-8-derived text
        // (swift-corelibs-foundation's range(of:), found by this harness).
        if channel.token.count >= 2, channel.token.allSatisfy(\.isASCII), bytes(shortened, contain: channel.token) {
            fatalError("shortened token shows the whole token: \(channel.token)")
        }
    }
    return 0
}

/// Whether `text`'s UTF-8 holds `part`'s UTF-8 as a run of bytes.
private func bytes(_ text: String, contain part: String) -> Bool {
    let haystack = Array(text.utf8)
    let needle = Array(part.utf8)
    guard needle.count <= haystack.count else { return false }
    return (0...(haystack.count - needle.count)).contains { haystack[$0..<($0 + needle.count)].elementsEqual(needle) }
}
