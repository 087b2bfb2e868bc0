public import Crypto
public import Foundation
import SIPMessage
import Synchronization

/// The parameters of a `Digest` Authorization header (RFC 7616 §3.4, RFC 3261 §22.4), read in one
/// pass over the header's bytes: each value is kept as a byte range of the header text (no
/// Substring, no String per value; a quoted value with escapes is unescaped once, after the
/// header's bytes), so parsing allocates nothing for a usual answer. A value.
public struct DigestCredentials: Hashable, Sendable {
    /// The parameters every answer may carry, in the order `fields` holds them.
    static let knownNames = ["username", "realm", "nonce", "uri", "response", "cnonce", "qop", "nc", "opaque", "algorithm"]
    /// The header as given, then the unescaped text of each quoted value that had escapes (after
    /// `parameters` is set: the values one after the other). Every value is a range of its UTF-8.
    private var text = ""
    private var fields = KnownFields()
    /// Parameters not in `knownNames`, in the order written (lower-case names).
    private var others: [Other] = []

    /// Where a value lies in `text`'s UTF-8 bytes.
    struct Span: Hashable {
        var start: Int32
        var end: Int32

        init(_ range: Range<Int>) {
            start = Int32(truncatingIfNeeded: range.lowerBound)
            end = Int32(truncatingIfNeeded: range.upperBound)
        }

        var range: Range<Int> { Int(start)..<Int(end) }
    }

    /// The known parameters: ten optional spans, stored inline (no array, no dictionary).
    struct KnownFields: Hashable {
        var username, realm, nonce, uri, response, cnonce, qop, nc, opaque, algorithm: Span?

        subscript(index: Int) -> Span? {
            get {
                switch index {
                case 0: username
                case 1: realm
                case 2: nonce
                case 3: uri
                case 4: response
                case 5: cnonce
                case 6: qop
                case 7: nc
                case 8: opaque
                default: algorithm
                }
            }
            set {
                switch index {
                case 0: username = newValue
                case 1: realm = newValue
                case 2: nonce = newValue
                case 3: uri = newValue
                case 4: response = newValue
                case 5: cnonce = newValue
                case 6: qop = newValue
                case 7: nc = newValue
                case 8: opaque = newValue
                default: algorithm = newValue
                }
            }
        }
    }

    private struct Other: Hashable {
        var name: String
        var value: Span
    }

    private init() {}

    /// Parses `Digest username="1001", realm="example.com", ...`; nil when it is not a Digest
    /// header or is malformed (an element without `=`, an empty or repeated name).
    public init?(header: String) {
        var text = header
        var escaped: [UInt8] = []
        guard var parsed = text.withUTF8({ DigestCredentials.parse($0, escaped: &escaped) }) else { return nil }
        if !escaped.isEmpty { text += String(decoding: escaped, as: UTF8.self) }
        parsed.text = text
        self = parsed
    }

    /// `escaped` gets the unescaped bytes of quoted values with escapes; their spans point past
    /// the header's bytes, where the caller appends them.
    private static func parse(_ bytes: UnsafeBufferPointer<UInt8>, escaped: inout [UInt8]) -> DigestCredentials? {
        let whole = SIPHeaderValueScanner.trim(bytes, 0..<bytes.count)
        guard bytes.count < Int(Int32.max) / 2, whole.count > 7, lowercasedEquals(bytes, whole.lowerBound..<whole.lowerBound + 6, "digest"),
            bytes[whole.lowerBound + 6] == 0x20 || bytes[whole.lowerBound + 6] == 0x09
        else { return nil }
        var result = DigestCredentials()
        var start = whole.lowerBound + 7
        while start <= whole.upperBound {
            let element = scanElement(bytes, start..<whole.upperBound)
            defer { start = element.end + 1 }
            var lower = start
            while lower < element.end, isWhitespace(bytes[lower]) { lower += 1 }
            guard lower < element.end else { continue }  // an empty element
            guard let eq = element.equals else { return nil }
            var upper = element.end
            while upper > eq + 1, isWhitespace(bytes[upper - 1]) { upper -= 1 }
            var nameEnd = eq
            while nameEnd > lower, isWhitespace(bytes[nameEnd - 1]) { nameEnd -= 1 }
            guard nameEnd > lower else { return nil }
            let name = lower..<nameEnd
            var valueStart = eq + 1
            while valueStart < upper, isWhitespace(bytes[valueStart]) { valueStart += 1 }
            let value: Span
            if upper - valueStart >= 2, bytes[valueStart] == UInt8(ascii: "\""), bytes[upper - 1] == UInt8(ascii: "\"") {
                let content = valueStart + 1..<upper - 1
                // A backslash after the `=` lies inside the quotes: all else there is whitespace.
                if element.escapes {
                    let from = bytes.count + escaped.count
                    unescape(bytes, content, into: &escaped)
                    value = Span(from..<bytes.count + escaped.count)
                } else {
                    value = Span(content)
                }
            } else {
                value = Span(valueStart..<upper)
            }
            if let known = knownIndex(bytes, name) {
                guard result.fields[known] == nil else { return nil }
                result.fields[known] = value
            } else {
                let lowered = String(decoding: UnsafeBufferPointer(rebasing: bytes[name]), as: UTF8.self).lowercased()
                guard !result.others.contains(where: { $0.name == lowered }) else { return nil }
                result.others.append(Other(name: lowered, value: value))
            }
        }
        return result
    }

    /// Every parameter by lower-case name. Setting it replaces them all.
    public var parameters: [String: String] {
        get {
            var all: [String: String] = [:]
            for (index, name) in DigestCredentials.knownNames.enumerated() {
                if let value = string(fields[index]) { all[name] = value }
            }
            for other in others { all[other.name] = string(other.value) }
            return all
        }
        set {
            var text = ""
            fields = KnownFields()
            others = []
            for (name, value) in newValue.sorted(by: { $0.key < $1.key }) {
                let lowered = name.lowercased()
                let span = Span(text.utf8.count..<text.utf8.count + value.utf8.count)
                text += value
                if let known = DigestCredentials.knownNames.firstIndex(of: lowered) {
                    fields[known] = span
                } else {
                    others.append(Other(name: lowered, value: span))
                }
            }
            self.text = text
        }
    }

    public var username: String? { string(fields.username) }
    public var realm: String? { string(fields.realm) }
    public var nonce: String? { string(fields.nonce) }
    public var uri: String? { string(fields.uri) }
    public var response: String? { string(fields.response) }
    public var cnonce: String? { string(fields.cnonce) }
    public var qop: String? { string(fields.qop) }
    public var nc: String? { string(fields.nc) }
    public var opaque: String? { string(fields.opaque) }
    /// The algorithm named (MD5 when absent, RFC 7616 §3.3).
    public var algorithm: Digest.Algorithm? {
        withBytes { bytes, fields in DigestCredentials.algorithm(bytes, fields.algorithm) }
    }

    /// The algorithm the span names (MD5 when there is none).
    static func algorithm(_ bytes: UnsafeBufferPointer<UInt8>, _ span: Span?) -> Digest.Algorithm? {
        guard let span else { return .md5 }
        return Digest.Algorithm.allCases.first { DigestCredentials.asciiCaseInsensitiveEquals(bytes, span, $0.rawValue) }
    }

    /// The realm named, compared without regard to ASCII case (the realm is a domain).
    func realmIs(_ realm: String) -> Bool {
        withBytes { bytes, fields in fields.realm.map { DigestCredentials.asciiCaseInsensitiveEquals(bytes, $0, realm) } ?? false }
    }

    /// Whether `realm?.lowercased() == domain`, without a String for an ASCII realm (any realm).
    func realmLowercasedEquals(_ domain: String) -> Bool {
        guard let span = fields.realm else { return false }
        var domain = domain
        // nil: one of them is not ASCII, so only Unicode lower-casing and String equality can tell.
        let ascii: Bool? = withBytes { bytes, _ in
            let given = UnsafeBufferPointer(rebasing: bytes[span.range])
            return domain.withUTF8 { lower in
                for c in lower where c >= 0x80 { return nil }
                // One pass over the realm: any non-ASCII byte decides, else the folded comparison.
                var equal = given.count == lower.count
                for index in 0..<given.count {
                    let c = given[index]
                    if c >= 0x80 { return nil }
                    if equal, (c >= 0x41 && c <= 0x5A ? c | 0x20 : c) != lower[index] { equal = false }
                }
                return equal
            }
        }
        return ascii ?? (string(span)?.lowercased() == domain)
    }

    /// Runs `body` on the text's UTF-8 bytes and the known parameters' spans into them (what
    /// `verify` reads, without a String or Substring each).
    func withBytes<R>(_ body: (UnsafeBufferPointer<UInt8>, KnownFields) -> R) -> R {
        var text = text
        let fields = fields
        return text.withUTF8 { body($0, fields) }
    }

    public static func == (lhs: DigestCredentials, rhs: DigestCredentials) -> Bool {
        for index in 0..<knownNames.count where lhs.string(lhs.fields[index]) != rhs.string(rhs.fields[index]) { return false }
        return lhs.others.count == rhs.others.count
            && zip(lhs.others, rhs.others).allSatisfy { $0.name == $1.name && lhs.string($0.value) == rhs.string($1.value) }
    }

    public func hash(into hasher: inout Hasher) {
        for index in 0..<DigestCredentials.knownNames.count { hasher.combine(string(fields[index])) }
        for other in others {
            hasher.combine(other.name)
            hasher.combine(string(other.value))
        }
    }

    private func string(_ span: Span?) -> String? {
        guard let span else { return nil }
        return withBytes { bytes, _ in String(decoding: UnsafeBufferPointer(rebasing: bytes[span.range]), as: UTF8.self) }
    }

    // MARK: Bytes

    /// One element of the parameter list from `range.lowerBound`, in one pass: where it ends (the
    /// first comma outside quotes and angle brackets, as `SIPHeaderValueScanner.listElementEnd`
    /// finds it), its first `=` (wherever it is), and whether a backslash follows that `=`.
    private static func scanElement(_ bytes: UnsafeBufferPointer<UInt8>, _ range: Range<Int>) -> (end: Int, equals: Int?, escapes: Bool) {
        let upper = range.upperBound
        var equals: Int?
        var escapes = false
        var angle = 0
        var i = range.lowerBound
        while i < upper {
            switch bytes[i] {
            case UInt8(ascii: "="): if equals == nil { equals = i }
            case UInt8(ascii: "\\"): if equals != nil { escapes = true }
            case UInt8(ascii: "\""):
                // A quoted string, to its closing quote: an escaped byte is skipped for quotes and
                // commas, not for the first `=`.
                i += 1
                if equals != nil, let base = bytes.baseAddress {
                    i = closingQuote(base, from: i, upper: upper, escapes: &escapes)
                    break
                }
                while i < upper {
                    let c = bytes[i]
                    if c == UInt8(ascii: "\"") { break }
                    if c == UInt8(ascii: "\\") {
                        if equals != nil {
                            escapes = true
                        } else if i + 1 < upper, bytes[i + 1] == UInt8(ascii: "=") {
                            equals = i + 1
                        }
                        i += 2
                        continue
                    }
                    if c == UInt8(ascii: "="), equals == nil { equals = i }
                    i += 1
                }
            case UInt8(ascii: "<"): angle += 1
            case UInt8(ascii: ">"): if angle > 0 { angle -= 1 }
            case UInt8(ascii: ","): if angle == 0 { return (i, equals, escapes) }
            default: break
            }
            i += 1
        }
        return (upper, equals, escapes)
    }

    /// Where the quoted string whose content starts at `start` ends (its closing quote, or `upper`
    /// when it has none, or past it when its last byte is a backslash), each escaped byte skipped;
    /// sets `escapes` when it has one. For a value (after the `=`): only the quote and the
    /// backslash matter there, so `memchr` finds them.
    private static func closingQuote(_ base: UnsafePointer<UInt8>, from start: Int, upper: Int, escapes: inout Bool) -> Int {
        let origin = UnsafeRawPointer(base)
        var i = start
        while i < upper {
            let quote = memchr(origin + i, Int32(UInt8(ascii: "\"")), upper - i).map { origin.distance(to: UnsafeRawPointer($0)) } ?? upper
            guard let backslash = memchr(origin + i, Int32(UInt8(ascii: "\\")), quote - i) else { return quote }
            escapes = true
            i = origin.distance(to: UnsafeRawPointer(backslash)) + 2
        }
        return i
    }

    /// SP, HTAB, CR or LF (what `SIPHeaderValueScanner.trim` trims).
    @inline(__always)
    private static func isWhitespace(_ c: UInt8) -> Bool {
        c == 0x20 || c == 0x09 || c == 0x0D || c == 0x0A
    }

    private static func unescape(_ bytes: UnsafeBufferPointer<UInt8>, _ range: Range<Int>, into out: inout [UInt8]) {
        var i = range.lowerBound
        while i < range.upperBound {
            if bytes[i] == UInt8(ascii: "\\"), i + 1 < range.upperBound { i += 1 }
            out.append(bytes[i])
            i += 1
        }
    }

    /// The index in `knownNames` of the name in `range` (any ASCII case), nil for another name:
    /// its length and first letter pick the one candidate, which is then compared in full.
    /// The candidate's first 8 bytes, folded to lower case, are compared as one word with its name's.
    private static func knownIndex(_ bytes: UnsafeBufferPointer<UInt8>, _ range: Range<Int>) -> Int? {
        let candidate: Int
        switch (range.count, bytes[range.lowerBound] | 0x20) {
        case (8, UInt8(ascii: "u")): candidate = 0
        case (5, UInt8(ascii: "r")): candidate = 1
        case (5, UInt8(ascii: "n")): candidate = 2
        case (3, UInt8(ascii: "u")): candidate = 3
        case (8, UInt8(ascii: "r")): candidate = 4
        case (6, UInt8(ascii: "c")): candidate = 5
        case (3, UInt8(ascii: "q")): candidate = 6
        case (2, UInt8(ascii: "n")): candidate = 7
        case (6, UInt8(ascii: "o")): candidate = 8
        case (9, UInt8(ascii: "a")): candidate = 9
        default: return nil
        }
        var word: UInt64 = 0
        for offset in 0..<min(range.count, 8) {
            let c = bytes[range.lowerBound + offset]
            word |= UInt64(c >= 0x41 && c <= 0x5A ? c | 0x20 : c) << (8 * offset)
        }
        guard word == knownWords[candidate] else { return nil }
        // Only `algorithm` is longer than a word: its ninth byte is an m.
        return range.count <= 8 || bytes[range.lowerBound + 8] | 0x20 == UInt8(ascii: "m") ? candidate : nil
    }

    /// The first 8 bytes of each of `knownNames`, packed as `knownIndex` packs a candidate.
    private static let knownWords: [UInt64] = knownNames.map { name in
        var word: UInt64 = 0
        for (offset, c) in name.utf8.prefix(8).enumerated() { word |= UInt64(c) << (8 * offset) }
        return word
    }

    /// Whether the bytes in `range` are `lowercase` (ASCII letters in any case).
    private static func lowercasedEquals(_ bytes: UnsafeBufferPointer<UInt8>, _ range: Range<Int>, _ lowercase: StaticString) -> Bool {
        guard range.count == lowercase.utf8CodeUnitCount else { return false }
        let expected = lowercase.utf8Start
        for offset in 0..<range.count {
            let c = bytes[range.lowerBound + offset]
            guard (c >= 0x41 && c <= 0x5A ? c | 0x20 : c) == expected[offset] else { return false }
        }
        return true
    }

    /// Compares the bytes of `span` with a text, ASCII letters without regard to case.
    static func asciiCaseInsensitiveEquals(_ bytes: UnsafeBufferPointer<UInt8>, _ span: Span, _ b: String) -> Bool {
        var y = b
        let start = Int(span.start)
        return y.withUTF8 { q in
            guard Int(span.end) - start == q.count else { return false }
            for index in 0..<q.count where bytes[start + index] != q[index] {
                let lower = bytes[start + index] | 0x20
                guard lower == q[index] | 0x20, lower >= 0x61, lower <= 0x7A else { return false }
            }
            return true
        }
    }
}

/// Issues digest challenges and checks answers to them, for SIP (RFC 3261 §22, RFC 7616, RFC 8760).
///
/// Which algorithms are offered is a setting (`digest_algorithms`): one challenge header each, in
/// the order given. The default is MD5 alone, as Kamailio, Asterisk and Flexisip do: SIPp 3.6.1
/// and libre-based clients give up on any 401 that carries a SHA-256 challenge (decisions.md). An
/// answer is accepted only in an algorithm that is offered.
///
/// Nonces are stateless (decisions.md): the issue time, random bytes and an HMAC under a secret all
/// instances share, so any instance can check a nonce another made. A nonce is good for
/// `nonceLifetime`; after that the answer is a new challenge with `stale=true`. With qop=auth the
/// nonce count must grow for each use of a nonce (replay protection, kept in memory).
///
/// Threading: thread-safe; the replay window is behind a lock, the last HA2 made behind a mutex.
public final class DigestAuthenticator: @unchecked Sendable {
    // @unchecked: `seenCounts` and `lastPurge` are only touched under `lock`; the rest is immutable
    // or a `Mutex`.

    /// What checking an Authorization header found.
    public enum Verdict: Hashable, Sendable {
        case authenticated(AddressOfRecord)
        /// Wrong credentials, unknown extension, bad header, replayed nonce count: challenge again.
        case rejected
        /// A correct answer to an expired nonce: challenge again with `stale=true`.
        case stale
    }

    /// The secret made ready for the nonces' HMAC (the padded blocks hashed once).
    private let nonceKey: HMACSHA256Key
    /// What stands in for an unknown extension's password in the same hash work (hex of the
    /// secret's first 4 bytes).
    private let unknownExtensionSalt: String
    public let nonceLifetime: TimeInterval
    /// The algorithms challenged with, most preferred first (never empty).
    public let algorithms: [Digest.Algorithm]
    private let opaque: String
    private let lock = NSLock()
    /// The last HA2 made, H(method:digest-uri): it depends only on what the answer itself shows
    /// (no secret), and every refresh of a phone names the same, so it is made once, not per check.
    private let lastHA2 = Mutex<HA2?>(nil)

    private struct HA2 {
        var algorithm: Digest.Algorithm
        var method: String
        var uri: [UInt8]
        var digest: DigestOutput
    }
    /// The last nonce count accepted for each nonce in use, with the nonce's HMAC prefix: a nonce
    /// whose prefix is the one recorded here was checked before, and is not HMAC'd again.
    private var seenCounts: [NonceKey: (count: UInt32, issued: Date, mac: NonceMAC)] = [:]
    private var lastPurge = Date.distantPast

    /// The MD5-only default of `digest_algorithms`.
    public static let defaultAlgorithms: [Digest.Algorithm] = [.md5]

    public init(secret: [UInt8], nonceLifetime: TimeInterval, algorithms: [Digest.Algorithm] = DigestAuthenticator.defaultAlgorithms) {
        precondition(!algorithms.isEmpty, "digest_algorithms names at least one algorithm")
        self.nonceKey = HMACSHA256Key(secret)
        self.unknownExtensionSalt = Hex.encode(secret.prefix(4))
        self.nonceLifetime = nonceLifetime
        self.algorithms = algorithms
        self.opaque = Hex.encode(Digest.hmacSHA256(key: secret, message: Array("rouse-opaque".utf8)).prefix(8))
    }

    /// The WWW-Authenticate (or Proxy-Authenticate) values for a challenge: one per configured
    /// algorithm, the most preferred first (RFC 8760 §2.4), all with the same nonce.
    public func challenges(realm: String, stale: Bool, now: Date) -> [String] {
        let nonce = makeNonce(now: now)
        return algorithms.map { algorithm in
            var value = "Digest realm=\(SIPHeaderValueScanner.quote(realm)), nonce=\"\(nonce)\", opaque=\"\(opaque)\""
            value += ", algorithm=\(algorithm.rawValue), qop=\"auth\""
            if stale { value += ", stale=true" }
            return value
        }
    }

    /// Checks `credentials` for `method` against the extension they name. `lookup` finds an
    /// extension's stored hashes; for an unknown one the same hash work is done on a stand-in, so
    /// a probe cannot tell the two apart by timing (decisions.md). The hashes are taken piece by
    /// piece, straight from the header's bytes, and the answer compared as bytes: no String is
    /// built but the extension's number.
    public func verify(
        _ credentials: DigestCredentials, method: String, realm: String, now: Date,
        lookup: (AddressOfRecord) -> ExtensionCredentials?
    ) -> Verdict {
        credentials.withBytes { bytes, answer in
            verify(bytes, answer, method: method, realm: realm, now: now, lookup: lookup)
        }
    }

    private func verify(
        _ bytes: UnsafeBufferPointer<UInt8>, _ answer: DigestCredentials.KnownFields, method: String, realm: String, now: Date,
        lookup: (AddressOfRecord) -> ExtensionCredentials?
    ) -> Verdict {
        guard let algorithm = DigestCredentials.algorithm(bytes, answer.algorithm), algorithms.contains(algorithm),
            let username = answer.username, let nonce = answer.nonce, let uri = answer.uri, let response = answer.response,
            let given = answer.realm, DigestCredentials.asciiCaseInsensitiveEquals(bytes, given, realm)
        else { return .rejected }
        func part(_ span: DigestCredentials.Span) -> UnsafeRawBufferPointer { UnsafeRawBufferPointer(UnsafeBufferPointer(rebasing: bytes[span.range])) }
        // The digest username is the number, or number@domain (decisions.md).
        var number = username
        if let at = username.range.first(where: { bytes[$0] == UInt8(ascii: "@") }) {
            guard DigestCredentials.asciiCaseInsensitiveEquals(bytes, DigestCredentials.Span(at + 1..<username.range.upperBound), realm) else {
                return .rejected
            }
            number = DigestCredentials.Span(username.range.lowerBound..<at)
        }
        let aor = AddressOfRecord(number: String(decoding: part(number), as: UTF8.self), domain: realm)
        let stored = lookup(aor)
        let colon = UInt8(ascii: ":")
        let ha2Digest = ha2(algorithm, method: method, uri: part(uri))
        let ha1: DigestOutput
        if let stored {
            ha1 = stored.ha1Digest(for: algorithm)
        } else {
            var standIn = DigestStream(algorithm)
            standIn.update(part(number))
            standIn.update(byte: colon)
            standIn.update(realm)
            standIn.update(byte: colon)
            standIn.update(unknownExtensionSalt)
            ha1 = standIn.finish()
        }
        // Each hash is finished before the next begins, so all reuse the thread's spare context.
        var expected = DigestStream(algorithm)
        expected.update(hexOf: ha1)
        expected.update(byte: colon)
        expected.update(part(nonce))
        expected.update(byte: colon)
        if let qop = answer.qop {
            // RFC 2069 compatibility when absent; `auth` alone otherwise.
            guard DigestCredentials.asciiCaseInsensitiveEquals(bytes, qop, "auth"), let cnonce = answer.cnonce, let nc = answer.nc else {
                return .rejected
            }
            expected.update(part(nc))
            expected.update(byte: colon)
            expected.update(part(cnonce))
            expected.update(":auth:")
        }
        expected.update(hexOf: ha2Digest)
        let matches = expected.finish().withUnsafeBytes { Hex.matches($0, hex: part(response)) }
        guard matches, stored != nil else { return .rejected }
        guard let issued = nonceIssue(UnsafeBufferPointer(rebasing: bytes[nonce.range])) else { return .rejected }
        if now.timeIntervalSince(issued.time) > nonceLifetime || issued.time.timeIntervalSince(now) > 60 { return .stale }
        if answer.qop != nil, let nc = answer.nc {
            guard let count = DigestAuthenticator.nonceCount(part(nc)),
                acceptCount(count, for: issued.key, mac: issued.mac, issued: issued.time, now: now)
            else { return .rejected }
        }
        return .authenticated(aor)
    }
    /// The nonce count `nc` (hex), read as `UInt32(text, radix: 16)` reads it (one optional sign;
    /// `-` only before zero), straight from the header's bytes.
    static func nonceCount(_ text: UnsafeRawBufferPointer) -> UInt32? {
        var index = 0
        let negative = text.first == UInt8(ascii: "-")
        if negative || text.first == UInt8(ascii: "+") { index = 1 }
        guard index < text.count else { return nil }
        var value: UInt32 = 0
        while index < text.count {
            guard let digit = Hex.value(text[index]), value <= UInt32.max >> 4 else { return nil }
            value = value << 4 | UInt32(digit)
            index += 1
        }
        return negative && value != 0 ? nil : value
    }

    /// H(method:uri) (RFC 7616 §3.4.3, qop=auth), from `lastHA2` when it is the same three.
    private func ha2(_ algorithm: Digest.Algorithm, method: String, uri: UnsafeRawBufferPointer) -> DigestOutput {
        let known = lastHA2.withLock { last in
            last.flatMap { $0.algorithm == algorithm && $0.method == method && $0.uri.elementsEqual(uri) ? $0.digest : nil }
        }
        if let known { return known }
        var stream = DigestStream(algorithm)
        stream.update(method)
        stream.update(byte: UInt8(ascii: ":"))
        stream.update(uri)
        let digest = stream.finish()
        let made = HA2(algorithm: algorithm, method: method, uri: Array(uri), digest: digest)
        lastHA2.withLock { $0 = made }
        return digest
    }

    /// hex(issue time in ms, 8 bytes) + hex(8 random bytes) + hex(HMAC prefix, 16 bytes).
    func makeNonce(now: Date) -> String {
        var body: [UInt8] = []
        let milliseconds = UInt64(max(0, now.timeIntervalSince1970 * 1000))
        for shift in stride(from: 56, through: 0, by: -8) { body.append(UInt8(truncatingIfNeeded: milliseconds >> UInt64(shift))) }
        body += SecureRandom.bytes(8)
        let mac = nonceKey.mac(body).bytes.prefix(16)
        return Hex.encode(body) + Hex.encode(mac)
    }

    /// The issue time of a nonce this server (or another sharing its secret) made; nil otherwise.
    func nonceIssueTime(_ nonce: String) -> Date? {
        var text = nonce
        return text.withUTF8 { nonceIssue($0)?.time }
    }

    /// A nonce's issue time, its first 16 bytes (time and random: what tells nonces apart) and its
    /// HMAC prefix, decoded on the stack; nil unless the prefix is right. A nonce in the replay
    /// window with this same prefix was checked when it was first used, and is not HMAC'd again.
    private func nonceIssue(_ hex: UnsafeBufferPointer<UInt8>) -> (time: Date, key: NonceKey, mac: NonceMAC)? {
        guard hex.count == 64 else { return nil }
        return withUnsafeTemporaryAllocation(of: UInt8.self, capacity: 32) { bytes -> (time: Date, key: NonceKey, mac: NonceMAC)? in
            for index in 0..<32 {
                guard let high = Hex.value(hex[2 * index]), let low = Hex.value(hex[2 * index + 1]) else { return nil }
                bytes[index] = high << 4 | low
            }
            func word(_ start: Int) -> UInt64 {
                var value: UInt64 = 0
                for index in start..<start + 8 { value = value << 8 | UInt64(bytes[index]) }
                return value
            }
            let key = NonceKey(milliseconds: word(0), random: word(8))
            let mac = NonceMAC(high: word(16), low: word(24))
            if !wasChecked(key, mac: mac) {
                // The HMAC prefix must match the nonce's last 32 hex digits.
                let signed = nonceKey.mac(UnsafeRawBufferPointer(UnsafeMutableBufferPointer(rebasing: bytes[0..<16]))).withUnsafeBytes {
                    Hex.matches(UnsafeRawBufferPointer(rebasing: $0.prefix(16)), hex: UnsafeRawBufferPointer(UnsafeBufferPointer(rebasing: hex[32...])))
                }
                guard signed else { return nil }
            }
            return (Date(timeIntervalSince1970: Double(key.milliseconds) / 1000), key, mac)
        }
    }

    /// What identifies a nonce in the replay window: its issue time and random part.
    struct NonceKey: Hashable {
        var milliseconds: UInt64
        var random: UInt64
    }

    /// A nonce's HMAC prefix (its last 16 bytes).
    struct NonceMAC: Hashable {
        var high: UInt64
        var low: UInt64
    }

    /// Whether the replay window holds `nonce` with this HMAC prefix (it was checked before).
    private func wasChecked(_ nonce: NonceKey, mac: NonceMAC) -> Bool {
        lock.lock()
        defer { lock.unlock() }
        guard let known = seenCounts[nonce]?.mac else { return false }
        return (known.high ^ mac.high) | (known.low ^ mac.low) == 0
    }

    /// RFC 7616 §3.4.5: each use of a nonce must carry a higher nonce count than the last.
    private func acceptCount(_ count: UInt32, for nonce: NonceKey, mac: NonceMAC, issued: Date, now: Date) -> Bool {
        lock.lock()
        defer { lock.unlock() }
        if now.timeIntervalSince(lastPurge) > 10 {
            // Counts of expired nonces are no longer needed: those nonces are refused as stale.
            let oldest = now.addingTimeInterval(-nonceLifetime - 60)
            seenCounts = seenCounts.filter { $0.value.issued >= oldest }
            lastPurge = now
        }
        // A nonce seen before (every refresh) is found and updated through one hash of its key.
        if let index = seenCounts.index(forKey: nonce) {
            guard count > seenCounts.values[index].count else { return false }
            seenCounts.values[index] = (count, issued, mac)
        } else {
            seenCounts[nonce] = (count, issued, mac)
        }
        return true
    }
}
