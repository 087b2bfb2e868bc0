/// The DNS record types RFC 3263 resolution reads.
public enum DNSRecordType: UInt16, Sendable, Hashable, CaseIterable, CustomStringConvertible {
    case a = 1
    case cname = 5
    case aaaa = 28
    case srv = 33
    case naptr = 35

    public var description: String {
        switch self {
        case .a: return "A"
        case .cname: return "CNAME"
        case .aaaa: return "AAAA"
        case .srv: return "SRV"
        case .naptr: return "NAPTR"
        }
    }
}

/// A name and the type asked for it. Names are kept lowercased without the trailing dot.
public struct DNSQuestion: Sendable, Hashable, CustomStringConvertible {
    public var name: String
    public var type: DNSRecordType

    public init(_ name: String, _ type: DNSRecordType) {
        self.name = DNSQuestion.normalised(name)
        self.type = type
    }

    public var description: String { "\(type) \(name)" }

    static func normalised(_ name: String) -> String {
        let lower = name.lowercased()
        return lower.hasSuffix(".") ? String(lower.dropLast()) : lower
    }
}

/// One resource record of an answer (RFC 1035 §4.1.3), its data decoded for the types Rouse reads.
public struct DNSRecord: Sendable, Hashable {
    /// What a record says.
    public enum Data: Sendable, Hashable {
        /// An IPv4 or IPv6 address in canonical text form.
        case address(String)
        case cname(String)
        /// RFC 2782.
        case srv(priority: UInt16, weight: UInt16, port: UInt16, target: String)
        /// RFC 3403 §4.1.
        case naptr(order: UInt16, preference: UInt16, flags: String, service: String, regexp: String, replacement: String)
        /// A type Rouse does not read (DNSSEC signatures, the OPT pseudo-record, …).
        case other(type: UInt16)
    }

    public var name: String
    public var ttl: UInt32
    public var data: Data

    public init(name: String, ttl: UInt32, data: Data) {
        self.name = DNSQuestion.normalised(name)
        self.ttl = ttl
        self.data = data
    }

    /// The record's type, when it is one Rouse reads.
    public var type: DNSRecordType? {
        switch data {
        case .address(let ip): return ip.contains(":") ? .aaaa : .a
        case .cname: return .cname
        case .srv: return .srv
        case .naptr: return .naptr
        case .other: return nil
        }
    }
}

/// Why bytes are not a DNS response Rouse can use.
public enum DNSParseError: Error, Sendable, Hashable, CustomStringConvertible {
    case truncatedMessage
    case badName
    case notAResponse

    public var description: String {
        switch self {
        case .truncatedMessage: return "the DNS message ends inside a field"
        case .badName: return "a DNS name is malformed or its compression loops"
        case .notAResponse: return "the DNS message is not a response"
        }
    }
}

/// A DNS message as RFC 1035 §4 lays it out: a query to send, or a response read from bytes. A
/// value, no I/O.
public struct DNSMessage: Sendable, Hashable {
    /// RFC 1035 §4.1.1 RCODE values Rouse tells apart.
    public enum ResponseCode: Sendable, Hashable {
        case noError, formatError, serverFailure, nameError, notImplemented, refused
        case other(UInt8)

        init(_ value: UInt8) {
            switch value {
            case 0: self = .noError
            case 1: self = .formatError
            case 2: self = .serverFailure
            case 3: self = .nameError
            case 4: self = .notImplemented
            case 5: self = .refused
            default: self = .other(value)
            }
        }
    }

    public var id: UInt16
    public var responseCode: ResponseCode
    /// TC: the answer did not fit the datagram; ask again over TCP.
    public var truncated: Bool
    public var questions: [DNSQuestion]
    public var answers: [DNSRecord]
    public var additional: [DNSRecord]

    /// The bytes of a recursive query for `question`, with an EDNS(0) OPT record (RFC 6891) offering
    /// 4,096-byte UDP answers, since NAPTR and SRV sets rarely fit 512 bytes.
    public static func query(id: UInt16, _ question: DNSQuestion) -> [UInt8] {
        var bytes: [UInt8] = []
        bytes.reserveCapacity(64)
        append16(id, to: &bytes)
        append16(0x0100, to: &bytes)  // RD
        append16(1, to: &bytes)  // QDCOUNT
        append16(0, to: &bytes)  // ANCOUNT
        append16(0, to: &bytes)  // NSCOUNT
        append16(1, to: &bytes)  // ARCOUNT: the OPT record
        for label in question.name.split(separator: ".") {
            let utf8 = Array(label.utf8.prefix(63))
            bytes.append(UInt8(utf8.count))
            bytes.append(contentsOf: utf8)
        }
        bytes.append(0)
        append16(question.type.rawValue, to: &bytes)
        append16(1, to: &bytes)  // IN
        bytes.append(0)  // OPT: the root name
        append16(41, to: &bytes)
        append16(4096, to: &bytes)  // the UDP payload size offered
        bytes.append(contentsOf: [0, 0, 0, 0])  // extended RCODE, version, flags
        append16(0, to: &bytes)  // no options
        return bytes
    }

    /// Reads a response. Records of types Rouse does not read are kept as `.other`.
    public init(parsing bytes: [UInt8]) throws(DNSParseError) {
        var reader = Reader(bytes: bytes)
        id = try reader.read16()
        let flags = try reader.read16()
        guard flags & 0x8000 != 0 else { throw .notAResponse }
        truncated = flags & 0x0200 != 0
        responseCode = ResponseCode(UInt8(flags & 0x000F))
        let questionCount = try reader.read16()
        let answerCount = try reader.read16()
        let authorityCount = try reader.read16()
        let additionalCount = try reader.read16()
        var questions: [DNSQuestion] = []
        for _ in 0..<questionCount {
            let name = try reader.readName()
            let type = try reader.read16()
            _ = try reader.read16()
            if let known = DNSRecordType(rawValue: type) { questions.append(DNSQuestion(name, known)) }
        }
        self.questions = questions
        answers = try (0..<answerCount).map { _ throws(DNSParseError) in try reader.readRecord() }
        for _ in 0..<authorityCount { _ = try reader.readRecord() }
        additional = try (0..<additionalCount).map { _ throws(DNSParseError) in try reader.readRecord() }
    }

    public init(id: UInt16, responseCode: ResponseCode, truncated: Bool = false, questions: [DNSQuestion], answers: [DNSRecord], additional: [DNSRecord] = []) {
        self.id = id
        self.responseCode = responseCode
        self.truncated = truncated
        self.questions = questions
        self.answers = answers
        self.additional = additional
    }

    static func append16(_ value: UInt16, to bytes: inout [UInt8]) {
        bytes.append(UInt8(value >> 8))
        bytes.append(UInt8(value & 0xFF))
    }

    /// Reads fields from a message, following name compression pointers (RFC 1035 §4.1.4).
    struct Reader {
        let bytes: [UInt8]
        var offset = 0

        mutating func read8() throws(DNSParseError) -> UInt8 {
            guard offset < bytes.count else { throw .truncatedMessage }
            defer { offset += 1 }
            return bytes[offset]
        }

        mutating func read16() throws(DNSParseError) -> UInt16 {
            guard offset + 2 <= bytes.count else { throw .truncatedMessage }
            defer { offset += 2 }
            return UInt16(bytes[offset]) << 8 | UInt16(bytes[offset + 1])
        }

        mutating func read32() throws(DNSParseError) -> UInt32 {
            let high = try read16()
            return UInt32(high) << 16 | UInt32(try read16())
        }

        mutating func readBytes(_ count: Int) throws(DNSParseError) -> ArraySlice<UInt8> {
            guard count >= 0, offset + count <= bytes.count else { throw .truncatedMessage }
            defer { offset += count }
            return bytes[offset..<(offset + count)]
        }

        /// A character-string (RFC 1035 §3.3): a length byte, then the bytes.
        mutating func readCharacterString() throws(DNSParseError) -> String {
            let length = Int(try read8())
            return String(decoding: try readBytes(length), as: UTF8.self)
        }

        /// A name at the current offset; the offset moves past it (not past what pointers point at).
        mutating func readName() throws(DNSParseError) -> String {
            var labels: [String] = []
            var position = offset
            var jumped = false
            var jumps = 0
            while true {
                guard position < bytes.count else { throw .truncatedMessage }
                let length = bytes[position]
                if length & 0xC0 == 0xC0 {
                    guard position + 1 < bytes.count else { throw .truncatedMessage }
                    let target = Int(UInt16(length & 0x3F) << 8 | UInt16(bytes[position + 1]))
                    if !jumped { offset = position + 2 }
                    jumped = true
                    jumps += 1
                    guard jumps <= 64, target < bytes.count else { throw .badName }
                    position = target
                    continue
                }
                guard length & 0xC0 == 0 else { throw .badName }
                if length == 0 {
                    if !jumped { offset = position + 1 }
                    break
                }
                let start = position + 1
                let end = start + Int(length)
                guard end <= bytes.count else { throw .truncatedMessage }
                labels.append(String(decoding: bytes[start..<end], as: UTF8.self))
                guard labels.count <= 127 else { throw .badName }
                position = end
            }
            return labels.joined(separator: ".")
        }

        mutating func readRecord() throws(DNSParseError) -> DNSRecord {
            let name = try readName()
            let type = try read16()
            _ = try read16()  // class
            let ttl = try read32()
            let length = Int(try read16())
            let start = offset
            guard start + length <= bytes.count else { throw .truncatedMessage }
            let data: DNSRecord.Data
            switch DNSRecordType(rawValue: type) {
            case .a:
                guard length == 4 else { throw .truncatedMessage }
                let octets = try readBytes(4)
                data = .address(octets.map(String.init).joined(separator: "."))
            case .aaaa:
                guard length == 16 else { throw .truncatedMessage }
                data = .address(Self.ipv6Text(Array(try readBytes(16))))
            case .cname:
                data = .cname(try readName())
            case .srv:
                let priority = try read16()
                let weight = try read16()
                let port = try read16()
                data = .srv(priority: priority, weight: weight, port: port, target: DNSQuestion.normalised(try readName()))
            case .naptr:
                let order = try read16()
                let preference = try read16()
                let flags = try readCharacterString()
                let service = try readCharacterString()
                let regexp = try readCharacterString()
                data = .naptr(
                    order: order, preference: preference, flags: flags, service: service, regexp: regexp,
                    replacement: DNSQuestion.normalised(try readName()))
            case nil:
                data = .other(type: type)
            }
            guard offset <= start + length else { throw .truncatedMessage }
            offset = start + length
            return DNSRecord(name: name, ttl: ttl, data: data)
        }

        /// RFC 5952 text: lowercase, the longest run of two or more zero groups written `::`.
        static func ipv6Text(_ bytes: [UInt8]) -> String {
            let groups = stride(from: 0, to: 16, by: 2).map { UInt16(bytes[$0]) << 8 | UInt16(bytes[$0 + 1]) }
            var best = (start: -1, length: 0)
            var run = (start: -1, length: 0)
            for (index, group) in groups.enumerated() {
                if group == 0 {
                    run = run.start < 0 ? (index, 1) : (run.start, run.length + 1)
                    if run.length > best.length { best = run }
                } else {
                    run = (-1, 0)
                }
            }
            let hex = groups.map { String($0, radix: 16) }
            guard best.length >= 2 else { return hex.joined(separator: ":") }
            let head = hex[..<best.start].joined(separator: ":")
            let tail = hex[(best.start + best.length)...].joined(separator: ":")
            return head + "::" + tail
        }
    }
}
