import Crypto
import Glibc

/// Rouse's own REGISTER load generator: plays many phones, each an extension with its password,
/// over one non-blocking UDP socket or a set of TCP connections to a loopback registrar (Rouse or
/// Kamailio alike), the way a phone registers.
///
/// A phone first sends a REGISTER without credentials and learns a nonce from the 401
/// (`challengeAll`). From then on each REGISTER carries an Authorization answering that nonce
/// (MD5, qop=auth) with a nonce count one higher than the last, so each registration is one round
/// trip (`register`). Each phone keeps one Call-ID and raises its CSeq, so its first REGISTER makes
/// a binding and the next ones refresh it. A 401 to an authenticated REGISTER (a stale nonce)
/// counts as a failure and gives the phone the new nonce for its next turn.
///
/// Over TCP, phone `i` always uses connection `i % connections` (its Via and Contact name that
/// connection, `;transport=tcp`), as phones behind an edge proxy share its connections.
///
/// Pacing: closed loop at the server's maximum (`window`: that many requests unanswered at all
/// times), or open loop at a target rate (`rate`: requests released on schedule whatever the
/// answers, at most `maxInFlight` unanswered; a run that cannot keep the rate says so by sending
/// fewer). Every run is bounded by a request count and a sending time, waits at most `timeout`
/// for each request still in flight, never retransmits, and counts answers other than the one
/// expected (failures) and requests never answered (timeouts).
///
/// Threading: not thread-safe; every method blocks the calling thread for the whole run and uses
/// no other thread. The sockets stay open (so bindings keep naming a live contact) until the
/// generator goes away.
final class RegisterLoadGenerator {
    /// The transport the phones register over.
    enum Transport: String, Sendable {
        case udp, tcp
    }

    /// How requests are released.
    enum Pacing: Sendable {
        /// Closed loop: keep this many requests unanswered at all times.
        case window(Int)
        /// Open loop: release this many requests per second, with at most `maxInFlight` unanswered.
        case rate(perSecond: Double, maxInFlight: Int)
    }

    /// Where to register and how.
    struct Configuration: Sendable {
        /// `127.0.0.1` or `::1` (UDP), `127.0.0.1` (TCP): the generator refuses any other address.
        var host: String
        var port: UInt16
        /// The SIP domain (and digest realm) of every phone.
        var domain: String
        /// Requests kept in flight (closed loop); see `pacing` for the open loop.
        var window = 64
        /// When set, requests are released at a rate instead of by `window`.
        var rate: Double?
        var transport = Transport.udp
        /// TCP connections the phones share.
        var connections = 64
        /// A request unanswered for this long counts as timed out.
        var timeout: Duration = .seconds(2)
        /// The Expires every REGISTER asks for.
        var expires = 3_600

        var pacing: Pacing {
            if let rate { return .rate(perSecond: rate, maxInFlight: max(window, 10_000)) }
            return .window(window)
        }
    }

    /// What one run measured: the load figures, and how many answers had each final status.
    struct Report: Sendable {
        var load = LoadReport()
        var statuses: [Int: Int] = [:]

        /// `401×3, 503×2`: the final statuses other than `expected`, for messages.
        func otherStatuses(expected: Int) -> String {
            statuses.filter { $0.key != expected }.sorted { $0.key < $1.key }.map { "\($0.key)×\($0.value)" }
                .joined(separator: ", ")
        }
    }

    /// One extension the generator registers as, and what it learnt from the registrar.
    private struct Phone {
        var number: [UInt8]
        /// MD5(number:realm:password), lower-case hex.
        var ha1: [UInt8]
        var nonce: [UInt8] = []
        var opaque: [UInt8] = []
        var nonceCount: UInt32 = 0
        var cseq: UInt32 = 0
        /// A request of this phone is in flight: its next one waits (the nonce count must grow in
        /// the order the registrar sees them).
        var busy = false
    }

    /// What one run sends.
    private enum Pass {
        /// Unauthenticated REGISTERs, each phone once; the answer expected is 401 with a nonce.
        case challenge
        /// Authenticated REGISTERs, phones in turn; the answer expected is 200.
        case register
    }

    /// The sockets the phones use.
    private enum Channel {
        case udp(UDPSocket)
        case tcp(TCPLoadConnections)
    }

    let configuration: Configuration
    private let channel: Channel
    private var phones: [Phone]
    /// Names this generator in Call-IDs, tags and branches: answers to another are told apart.
    private let generatorID: String
    private var runNumber = 0
    private let ha2: [UInt8]
    private let cnonce: [UInt8]
    /// Fixed pieces of every request, made once; the first and the contact's tail per connection.
    private let requestHeads: [[UInt8]]
    private let fromTail: [UInt8]
    private let toTail: [UInt8]
    private let contactTails: [[UInt8]]
    private let realmAndNonce: [UInt8]
    private let uriAndResponse: [UInt8]

    /// Opens the socket (or connections); `phones` are (number, password) pairs of extensions in
    /// `domain`.
    init(configuration: Configuration, phones: [(number: String, password: String)]) throws(UDPLoadGenerator.Failure) {
        guard configuration.host == "127.0.0.1" || (configuration.host == "::1" && configuration.transport == .udp) else {
            throw .notLoopback(configuration.host)
        }
        self.configuration = configuration
        let localPorts: [UInt16]
        switch configuration.transport {
        case .udp:
            let socket = try UDPSocket(connectingTo: configuration.host, port: configuration.port)
            channel = .udp(socket)
            localPorts = [socket.localPort]
        case .tcp:
            let connections = try TCPLoadConnections(host: configuration.host, port: configuration.port, count: configuration.connections)
            channel = .tcp(connections)
            localPorts = (0..<connections.count).map { connections.localPort($0) }
        }
        self.phones = phones.map {
            Phone(number: Array($0.number.utf8), ha1: Array(Digest.hex(.md5, "\($0.number):\(configuration.domain):\($0.password)").utf8))
        }
        var generator = SystemRandomNumberGenerator()
        generatorID = String(generator.next() as UInt64, radix: 36)
        ha2 = Array(Digest.hex(.md5, "REGISTER:sip:\(configuration.domain)").utf8)
        cnonce = Array("c\(generatorID)".utf8)
        let domain = configuration.domain
        let via = configuration.transport == .udp ? "UDP" : "TCP"
        let contactParameter = configuration.transport == .udp ? "" : ";transport=tcp"
        let locals = localPorts.map { configuration.host.contains(":") ? "[\(configuration.host)]:\($0)" : "\(configuration.host):\($0)" }
        requestHeads = locals.map { Array("REGISTER sip:\(domain) SIP/2.0\r\nVia: SIP/2.0/\(via) \($0);rport;branch=".utf8) }
        fromTail = Array("@\(domain)>;tag=rb\(generatorID)\r\nTo: <sip:".utf8)
        toTail = Array("@\(domain)>\r\nCall-ID: rb\(generatorID)-".utf8)
        contactTails = locals.map { Array("@\($0)\(contactParameter)>\r\nExpires: \(configuration.expires)\r\n".utf8) }
        realmAndNonce = Array("\", realm=\"\(domain)\", nonce=\"".utf8)
        uriAndResponse = Array("\", uri=\"sip:\(domain)\", response=\"".utf8)
    }

    deinit {
        switch channel {
        case .udp(let socket): socket.close()
        case .tcp(let connections): connections.close()
        }
    }

    var phoneCount: Int { phones.count }

    /// TCP connections the server closed or that broke (0 over UDP).
    var connectionsClosed: Int {
        if case .tcp(let connections) = channel { return connections.closedByPeer }
        return 0
    }

    /// Phones whose nonce is known.
    var phonesWithNonce: Int { phones.reduce(0) { $0 + ($1.nonce.isEmpty ? 0 : 1) } }

    /// Sends one unauthenticated REGISTER for each phone of `range` and keeps the nonce of each 401.
    func challengeAll(_ range: Range<Int>, duration: Duration) throws(UDPLoadGenerator.Failure) -> Report {
        try execute(.challenge, range: range, maxRequests: range.count, duration: duration)
    }

    /// Sends authenticated REGISTERs for the phones of `range` in turn (each phone's next one only
    /// after the window has moved past its last), until `maxRequests` are sent or `duration` passes.
    func register(_ range: Range<Int>, maxRequests: Int, duration: Duration) throws(UDPLoadGenerator.Failure) -> Report {
        try execute(.register, range: range, maxRequests: maxRequests, duration: duration)
    }

    // MARK: The run loop

    /// What became of a request.
    private enum Fate: UInt8 {
        case inFlight, answered, timedOut
    }

    private func execute(_ pass: Pass, range: Range<Int>, maxRequests: Int, duration: Duration) throws(UDPLoadGenerator.Failure) -> Report {
        precondition(range.lowerBound >= 0 && range.upperBound <= phones.count, "phones out of range")
        guard !range.isEmpty, maxRequests > 0 else { return Report() }
        runNumber += 1
        let branchPrefix = Array("z9hG4bK.rb\(generatorID)x\(runNumber)-".utf8)
        let branchMarker = Array("branch=".utf8) + branchPrefix
        let pacing: Pacing = switch configuration.pacing {
        case .window(let size): .window(max(1, min(size, range.count)))
        case .rate(let perSecond, let cap): .rate(perSecond: perSecond, maxInFlight: max(1, min(cap, range.count)))
        }
        let timeout = Self.nanoseconds(configuration.timeout)

        var report = Report()
        var sentAt: [UInt64] = []
        var phoneOf: [Int32] = []
        var fates: [Fate] = []
        let expected = min(maxRequests, 1 << 21)
        sentAt.reserveCapacity(expected)
        phoneOf.reserveCapacity(expected)
        fates.reserveCapacity(expected)
        report.load.latencies.reserveCapacity(expected)
        var oldestUnresolved = 0
        var inFlight = 0
        var buffer: [UInt8] = []
        buffer.reserveCapacity(1_024)
        var scratch: [UInt8] = []
        scratch.reserveCapacity(256)
        let receiveBuffer = UnsafeMutableRawBufferPointer.allocate(byteCount: 65_536, alignment: 8)
        defer { receiveBuffer.deallocate() }

        let start = MonotonicClock.now()
        let sendUntil = start &+ Self.nanoseconds(duration)
        var lastAnswerAt = start

        /// Whether pacing lets one more request go at `now`; when not, when it next may (the
        /// window waits for an answer instead).
        func release(at now: UInt64) -> (allowed: Bool, due: UInt64?) {
            switch pacing {
            case .window(let size):
                return (inFlight < size, nil)
            case .rate(let perSecond, let cap):
                let due = start &+ UInt64(Double(sentAt.count) / perSecond * 1e9)
                return (inFlight < cap && due <= now, inFlight < cap ? due : nil)
            }
        }

        func handleAnswer(_ message: UnsafeRawBufferPointer) {
            let answeredAt = MonotonicClock.now()
            guard let status = Self.status(of: message),
                let branch = Self.find(branchMarker, in: message),
                let sequence = Self.decimal(in: message, from: branch.upperBound),
                sequence < fates.count, fates[sequence] == .inFlight
            else {
                report.load.unmatched += 1
                return
            }
            guard status >= 200 else { return }
            fates[sequence] = .answered
            inFlight -= 1
            report.statuses[status, default: 0] += 1
            report.load.latencies.append(answeredAt - sentAt[sequence])
            lastAnswerAt = answeredAt
            let phone = Int(phoneOf[sequence])
            phones[phone].busy = false
            var learnt = false
            if status == 401, let nonce = Self.quotedParameter("nonce=\"", in: message) {
                phones[phone].nonce = nonce
                phones[phone].opaque = Self.quotedParameter("opaque=\"", in: message) ?? []
                phones[phone].nonceCount = 0
                learnt = true
            }
            let ok = switch pass {
            case .challenge: learnt
            case .register: status == 200
            }
            if ok { report.load.succeeded += 1 } else { report.load.failed += 1 }
            while oldestUnresolved < fates.count && fates[oldestUnresolved] != .inFlight { oldestUnresolved += 1 }
        }

        while true {
            let now = MonotonicClock.now()
            let sending = sentAt.count < maxRequests && now < sendUntil
            if !sending && inFlight == 0 { break }

            var nextWake = now &+ timeout
            var blocked = false
            if sending {
                while sentAt.count < maxRequests {
                    let (allowed, due) = release(at: MonotonicClock.now())
                    guard allowed else {
                        blocked = true
                        if let due { nextWake = min(nextWake, due) }
                        break
                    }
                    let phone = range.lowerBound + sentAt.count % range.count
                    guard !phones[phone].busy else {
                        blocked = true
                        break
                    }
                    render(pass, phone: phone, sequence: sentAt.count, branchPrefix: branchPrefix, into: &buffer, scratch: &scratch)
                    let sentTime = MonotonicClock.now()
                    let taken: Bool
                    switch channel {
                    case .udp(let socket): taken = try socket.send(buffer)
                    case .tcp(let connections): taken = try connections.send(buffer, on: phone % connections.count)
                    }
                    guard taken else {
                        report.load.sendErrors += 1
                        // The phone's counters moved on; the registrar never saw this nonce count,
                        // and a higher one is still accepted next time.
                        blocked = true
                        nextWake = now &+ 1_000_000
                        break
                    }
                    sentAt.append(sentTime)
                    phoneOf.append(Int32(phone))
                    phones[phone].busy = true
                    fates.append(.inFlight)
                    inFlight += 1
                }
                nextWake = min(nextWake, sendUntil)
            }

            var received = 0
            switch channel {
            case .udp(let socket):
                while let length = try socket.receive(into: receiveBuffer) {
                    received += 1
                    handleAnswer(UnsafeRawBufferPointer(rebasing: receiveBuffer[0..<length]))
                }
            case .tcp(let connections):
                received = try connections.receiveAvailable { handleAnswer($0) }
            }

            let afterReceiving = MonotonicClock.now()
            while oldestUnresolved < fates.count {
                if fates[oldestUnresolved] == .inFlight {
                    guard sentAt[oldestUnresolved] &+ timeout <= afterReceiving else { break }
                    fates[oldestUnresolved] = .timedOut
                    phones[Int(phoneOf[oldestUnresolved])].busy = false
                    inFlight -= 1
                    report.load.timedOut += 1
                }
                oldestUnresolved += 1
            }
            if oldestUnresolved < fates.count { nextWake = min(nextWake, sentAt[oldestUnresolved] &+ timeout) }

            // Wait only when there is nothing to do until an answer arrives or a deadline passes.
            if received == 0 && (blocked || !sending) && (sending || inFlight > 0) {
                let wait = nextWake > afterReceiving ? nextWake - afterReceiving : 0
                let milliseconds = Int32(min(max((wait + 999_999) / 1_000_000, 1), 1_000))
                switch channel {
                case .udp(let socket): try socket.waitReadable(milliseconds: milliseconds)
                case .tcp(let connections): try connections.waitReadable(milliseconds: milliseconds)
                }
            }
        }

        report.load.sent = sentAt.count
        report.load.seconds = Double(max(lastAnswerAt, start) - start) / 1e9
        report.load.latencies.sort()
        return report
    }

    // MARK: Requests

    private func render(_ pass: Pass, phone index: Int, sequence: Int, branchPrefix: [UInt8], into buffer: inout [UInt8], scratch: inout [UInt8]) {
        phones[index].cseq += 1
        let phone = phones[index]
        buffer.removeAll(keepingCapacity: true)
        let connection = index % requestHeads.count
        buffer.append(contentsOf: requestHeads[connection])
        buffer.append(contentsOf: branchPrefix)
        Self.appendDecimal(sequence, to: &buffer)
        buffer.append(contentsOf: "\r\nMax-Forwards: 70\r\nFrom: <sip:".utf8)
        buffer.append(contentsOf: phone.number)
        buffer.append(contentsOf: fromTail)
        buffer.append(contentsOf: phone.number)
        buffer.append(contentsOf: toTail)
        Self.appendDecimal(index, to: &buffer)
        buffer.append(contentsOf: "@rouse-bench\r\nCSeq: ".utf8)
        Self.appendDecimal(Int(phone.cseq), to: &buffer)
        buffer.append(contentsOf: " REGISTER\r\nContact: <sip:".utf8)
        buffer.append(contentsOf: phone.number)
        buffer.append(contentsOf: contactTails[connection])
        if pass == .register && !phone.nonce.isEmpty {
            phones[index].nonceCount += 1
            var nc: [UInt8] = []
            Self.appendHex8(phones[index].nonceCount, to: &nc)
            // RFC 7616 §3.4.1: response = KD(HA1, nonce:nc:cnonce:qop:HA2), MD5 in hex.
            scratch.removeAll(keepingCapacity: true)
            scratch.append(contentsOf: phone.ha1)
            scratch.append(UInt8(ascii: ":"))
            scratch.append(contentsOf: phone.nonce)
            scratch.append(UInt8(ascii: ":"))
            scratch.append(contentsOf: nc)
            scratch.append(UInt8(ascii: ":"))
            scratch.append(contentsOf: cnonce)
            scratch.append(contentsOf: ":auth:".utf8)
            scratch.append(contentsOf: ha2)
            let response = Digest.hash(.md5, scratch)

            buffer.append(contentsOf: "Authorization: Digest username=\"".utf8)
            buffer.append(contentsOf: phone.number)
            buffer.append(contentsOf: realmAndNonce)
            buffer.append(contentsOf: phone.nonce)
            buffer.append(contentsOf: uriAndResponse)
            Self.appendHex(response, to: &buffer)
            buffer.append(contentsOf: "\", algorithm=MD5, cnonce=\"".utf8)
            buffer.append(contentsOf: cnonce)
            buffer.append(contentsOf: "\", qop=auth, nc=".utf8)
            buffer.append(contentsOf: nc)
            if !phone.opaque.isEmpty {
                buffer.append(contentsOf: ", opaque=\"".utf8)
                buffer.append(contentsOf: phone.opaque)
                buffer.append(UInt8(ascii: "\""))
            }
            buffer.append(contentsOf: "\r\n".utf8)
        }
        buffer.append(contentsOf: "User-Agent: rouse-bench\r\nContent-Length: 0\r\n\r\n".utf8)
    }

    // MARK: Byte helpers

    private static let hexDigits = Array("0123456789abcdef".utf8)

    private static func appendHex(_ bytes: [UInt8], to buffer: inout [UInt8]) {
        for byte in bytes {
            buffer.append(hexDigits[Int(byte >> 4)])
            buffer.append(hexDigits[Int(byte & 0x0f)])
        }
    }

    private static func appendHex8(_ value: UInt32, to buffer: inout [UInt8]) {
        for shift in stride(from: 28, through: 0, by: -4) { buffer.append(hexDigits[Int((value >> UInt32(shift)) & 0x0f)]) }
    }

    private static func appendDecimal(_ value: Int, to buffer: inout [UInt8]) {
        guard value > 0 else {
            buffer.append(UInt8(ascii: "0"))
            return
        }
        var divisor = 1
        while divisor <= value / 10 { divisor *= 10 }
        var remaining = value
        while divisor > 0 {
            buffer.append(UInt8(ascii: "0") + UInt8(remaining / divisor))
            remaining %= divisor
            divisor /= 10
        }
    }

    /// The status code of a well-formed status line; nil for anything else.
    private static func status(of datagram: UnsafeRawBufferPointer) -> Int? {
        guard datagram.count > 12, datagram.starts(with: "SIP/2.0 ".utf8) else { return nil }
        var status = 0
        for offset in 8..<11 {
            let digit = datagram[offset]
            guard digit >= UInt8(ascii: "0") && digit <= UInt8(ascii: "9") else { return nil }
            status = status * 10 + Int(digit - UInt8(ascii: "0"))
        }
        return status
    }

    /// The value of the first `name="value"` (name given with `="`), up to its closing quote.
    private static func quotedParameter(_ name: String, in datagram: UnsafeRawBufferPointer) -> [UInt8]? {
        guard let found = find(Array(name.utf8), in: datagram) else { return nil }
        var end = found.upperBound
        while end < datagram.count && datagram[end] != UInt8(ascii: "\"") && datagram[end] != UInt8(ascii: "\r") { end += 1 }
        guard end < datagram.count, datagram[end] == UInt8(ascii: "\""), end > found.upperBound else { return nil }
        return Array(datagram[found.upperBound..<end])
    }

    /// The non-negative decimal number starting at `start`, if at least one digit is there.
    private static func decimal(in bytes: UnsafeRawBufferPointer, from start: Int) -> Int? {
        var index = start
        var value = 0
        while index < bytes.count, bytes[index] >= UInt8(ascii: "0"), bytes[index] <= UInt8(ascii: "9"), index - start < 18 {
            value = value * 10 + Int(bytes[index] - UInt8(ascii: "0"))
            index += 1
        }
        return index > start ? value : nil
    }

    /// The first occurrence of `needle` in `haystack`, byte for byte.
    private static func find(_ needle: [UInt8], in haystack: UnsafeRawBufferPointer) -> Range<Int>? {
        guard !needle.isEmpty, haystack.count >= needle.count else { return nil }
        let first = needle[0]
        var start = 0
        while start <= haystack.count - needle.count {
            if haystack[start] == first {
                var offset = 1
                while offset < needle.count && haystack[start + offset] == needle[offset] { offset += 1 }
                if offset == needle.count { return start..<(start + needle.count) }
            }
            start += 1
        }
        return nil
    }

    private static func nanoseconds(_ duration: Duration) -> UInt64 {
        let (seconds, attoseconds) = duration.components
        return UInt64(max(seconds, 0)) * 1_000_000_000 + UInt64(max(attoseconds, 0) / 1_000_000_000)
    }
}
