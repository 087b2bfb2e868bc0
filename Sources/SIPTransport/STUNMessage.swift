/// A STUN message (RFC 5389 §6) as bytes and back: the 20-byte header (type, length, magic
/// cookie, transaction ID) and its attributes, checked for FINGERPRINT when one is present. Rouse
/// needs STUN only to answer the Binding requests phones send as UDP keep-alives on the SIP port
/// (RFC 5626 §8), so it knows just the attributes that takes. A value; pure, no I/O.
public struct STUNMessage: Hashable, Sendable {
    /// The class bits of the message type (RFC 5389 §6).
    public enum MessageClass: UInt16, Hashable, Sendable {
        case request = 0b00, indication = 0b01, successResponse = 0b10, errorResponse = 0b11
    }

    /// The fixed value at bytes 4–7 that tells STUN from other protocols on the same port.
    public static let magicCookie: UInt32 = 0x2112_A442
    /// The Binding method, the only one RFC 5389 defines.
    public static let bindingMethod: UInt16 = 0x001
    /// The header's size; the length field counts the bytes after it.
    public static let headerLength = 20

    /// The 12-bit method.
    public var method: UInt16
    public var messageClass: MessageClass
    /// 12 bytes chosen by the client; a response carries the request's.
    public var transactionID: [UInt8]
    /// In order, FINGERPRINT excluded (it is checked when parsing and added when encoding).
    public var attributes: [STUNAttribute]
    /// The parsed message ended with a valid FINGERPRINT.
    public var hadFingerprint = false

    public init(method: UInt16, messageClass: MessageClass, transactionID: [UInt8], attributes: [STUNAttribute] = []) {
        self.method = method
        self.messageClass = messageClass
        self.transactionID = transactionID
        self.attributes = attributes
    }

    /// Whether a datagram is STUN and not SIP (RFC 5626 §8, RFC 7983 §7): the first two bits are
    /// zero (a SIP message starts with a letter), it holds a whole header, and bytes 4–7 are the
    /// magic cookie.
    public static func looksLikeSTUN(_ bytes: [UInt8]) -> Bool {
        bytes.count >= headerLength && bytes[0] & 0xC0 == 0 && readUInt32(bytes, at: 4) == magicCookie
    }

    /// Reads a whole message; a FINGERPRINT, when present, must be the last attribute and right.
    public init(parsing bytes: [UInt8]) throws(STUNParseError) {
        guard Self.looksLikeSTUN(bytes) else { throw .notSTUN }
        let length = Int(Self.readUInt16(bytes, at: 2))
        guard length % 4 == 0, Self.headerLength + length == bytes.count else { throw .badLength }
        let type = Self.readUInt16(bytes, at: 0)
        messageClass = MessageClass(rawValue: ((type >> 7) & 0b10) | ((type >> 4) & 0b01))!
        method = (type & 0x000F) | ((type >> 1) & 0x0070) | ((type >> 2) & 0x0F80)
        transactionID = Array(bytes[8..<20])
        attributes = []
        var offset = Self.headerLength
        while offset < bytes.count {
            guard bytes.count - offset >= 4 else { throw .badAttribute }
            let attributeType = Self.readUInt16(bytes, at: offset)
            let valueLength = Int(Self.readUInt16(bytes, at: offset + 2))
            let paddedEnd = offset + 4 + (valueLength + 3) / 4 * 4
            guard paddedEnd <= bytes.count else { throw .badAttribute }
            let value = Array(bytes[(offset + 4)..<(offset + 4 + valueLength)])
            if attributeType == STUNAttribute.fingerprint {
                // §15.5: the last attribute, a CRC-32 of everything before it.
                guard valueLength == 4, paddedEnd == bytes.count,
                    Self.readUInt32(value, at: 0) == Self.fingerprint(of: bytes[..<offset])
                else { throw .badFingerprint }
                hadFingerprint = true
            } else {
                attributes.append(STUNAttribute(type: attributeType, value: value))
            }
            offset = paddedEnd
        }
    }

    /// The first attribute of `type`.
    public func attribute(_ type: UInt16) -> STUNAttribute? {
        attributes.first { $0.type == type }
    }

    /// The message as bytes, with a FINGERPRINT last when `fingerprint` (§15.5).
    public func encoded(fingerprint: Bool = false) -> [UInt8] {
        let classBits = messageClass.rawValue
        let type = (method & 0x000F) | ((method & 0x0070) << 1) | ((method & 0x0F80) << 2)
            | ((classBits & 0b01) << 4) | ((classBits & 0b10) << 7)
        var bytes: [UInt8] = []
        Self.append(type, to: &bytes)
        Self.append(UInt16(0), to: &bytes)  // the length, set below
        Self.append(Self.magicCookie, to: &bytes)
        bytes += transactionID
        for attribute in attributes {
            Self.append(attribute.type, to: &bytes)
            Self.append(UInt16(attribute.value.count), to: &bytes)
            bytes += attribute.value
            bytes += [UInt8](repeating: 0, count: (4 - attribute.value.count % 4) % 4)
        }
        if fingerprint {
            // The length already counts the FINGERPRINT attribute when its CRC is taken.
            Self.setLength(bytes.count - Self.headerLength + 8, in: &bytes)
            let crc = Self.fingerprint(of: bytes[...])
            Self.append(STUNAttribute.fingerprint, to: &bytes)
            Self.append(UInt16(4), to: &bytes)
            Self.append(crc, to: &bytes)
        }
        Self.setLength(bytes.count - Self.headerLength, in: &bytes)
        return bytes
    }

    /// FINGERPRINT's value: the CRC-32 of `bytes` XOR 0x5354554e (§15.5).
    static func fingerprint(of bytes: ArraySlice<UInt8>) -> UInt32 {
        CRC32.checksum(bytes) ^ 0x5354_554E
    }

    static func readUInt16(_ bytes: [UInt8], at offset: Int) -> UInt16 {
        UInt16(bytes[offset]) << 8 | UInt16(bytes[offset + 1])
    }

    static func readUInt32(_ bytes: [UInt8], at offset: Int) -> UInt32 {
        UInt32(readUInt16(bytes, at: offset)) << 16 | UInt32(readUInt16(bytes, at: offset + 2))
    }

    static func append(_ value: UInt16, to bytes: inout [UInt8]) {
        bytes += [UInt8(value >> 8), UInt8(value & 0xFF)]
    }

    static func append(_ value: UInt32, to bytes: inout [UInt8]) {
        append(UInt16(value >> 16), to: &bytes)
        append(UInt16(value & 0xFFFF), to: &bytes)
    }

    private static func setLength(_ length: Int, in bytes: inout [UInt8]) {
        bytes[2] = UInt8((length >> 8) & 0xFF)
        bytes[3] = UInt8(length & 0xFF)
    }
}

/// One STUN attribute: its type and its value without padding (RFC 5389 §15). A value.
public struct STUNAttribute: Hashable, Sendable {
    public var type: UInt16
    public var value: [UInt8]

    public init(type: UInt16, value: [UInt8]) {
        self.type = type
        self.value = value
    }

    public static let mappedAddress: UInt16 = 0x0001
    public static let username: UInt16 = 0x0006
    public static let messageIntegrity: UInt16 = 0x0008
    public static let errorCode: UInt16 = 0x0009
    public static let unknownAttributes: UInt16 = 0x000A
    public static let realm: UInt16 = 0x0014
    public static let nonce: UInt16 = 0x0015
    public static let xorMappedAddress: UInt16 = 0x0020
    public static let software: UInt16 = 0x8022
    public static let fingerprint: UInt16 = 0x8028

    /// Types below 0x8000 are comprehension-required: an agent that does not know one must refuse
    /// the request (§15).
    public var isComprehensionRequired: Bool { type < 0x8000 }

    /// XOR-MAPPED-ADDRESS (§15.2) of `ip` (4 or 16 bytes) and `port`: the port XOR the cookie's top
    /// half, the address XOR the cookie (and, for IPv6, the transaction ID).
    public static func xorMappedAddress(ip: [UInt8], port: UInt16, transactionID: [UInt8]) -> STUNAttribute {
        var value: [UInt8] = [0, ip.count == 16 ? 0x02 : 0x01]
        STUNMessage.append(port ^ UInt16(STUNMessage.magicCookie >> 16), to: &value)
        value += zip(ip, xorKey(transactionID)).map { $0 ^ $1 }
        return STUNAttribute(type: xorMappedAddress, value: value)
    }

    /// The address and port of an XOR-MAPPED-ADDRESS, nil when the value is malformed.
    public func xorMappedAddress(transactionID: [UInt8]) -> (ip: [UInt8], port: UInt16)? {
        guard type == Self.xorMappedAddress, value.count >= 4 else { return nil }
        let addressLength = value[1] == 0x01 ? 4 : value[1] == 0x02 ? 16 : 0
        guard addressLength > 0, value.count == 4 + addressLength else { return nil }
        let port = STUNMessage.readUInt16(value, at: 2) ^ UInt16(STUNMessage.magicCookie >> 16)
        let ip = zip(value[4...], Self.xorKey(transactionID)).map { $0 ^ $1 }
        return (ip, port)
    }

    /// ERROR-CODE (§15.6): the class and number of `code` and its reason phrase.
    public static func errorCode(_ code: Int, reason: String) -> STUNAttribute {
        STUNAttribute(type: errorCode, value: [0, 0, UInt8(code / 100), UInt8(code % 100)] + Array(reason.utf8))
    }

    /// UNKNOWN-ATTRIBUTES (§15.9): the types a request carried that are not understood.
    public static func unknownAttributes(_ types: [UInt16]) -> STUNAttribute {
        var value: [UInt8] = []
        for type in types { STUNMessage.append(type, to: &value) }
        return STUNAttribute(type: unknownAttributes, value: value)
    }

    /// The magic cookie followed by the transaction ID: what an address is XORed with.
    private static func xorKey(_ transactionID: [UInt8]) -> [UInt8] {
        var key: [UInt8] = []
        STUNMessage.append(STUNMessage.magicCookie, to: &key)
        return key + transactionID
    }
}

/// Why bytes are not a usable STUN message.
public enum STUNParseError: Error, Hashable, Sendable {
    /// Too short, the first bits set, or no magic cookie: not STUN at all.
    case notSTUN
    /// The length field disagrees with the datagram, or is not a multiple of 4.
    case badLength
    /// An attribute runs past the end of the message.
    case badAttribute
    /// A FINGERPRINT that is wrong or not last.
    case badFingerprint
}

/// Answers STUN keep-alives on the SIP UDP port (RFC 5626 §8, RFC 5389 §7.3): a Binding request
/// gets a success response with the request's source in XOR-MAPPED-ADDRESS (and a FINGERPRINT when
/// the request had one); one with a comprehension-required attribute STUN does not define gets
/// 420 Unknown Attribute. Anything else (indications, responses, other methods, malformed bytes)
/// is dropped. No authentication: keep-alives carry none. The answer is at most about twice the
/// size of the smallest request that causes it, so a spoofed source gains no amplification worth
/// having. Pure functions.
public enum STUNKeepAliveResponder {
    /// Comprehension-required attributes RFC 5389 defines: a request may carry them.
    static let understood: Set<UInt16> = [
        STUNAttribute.mappedAddress, STUNAttribute.username, STUNAttribute.messageIntegrity, STUNAttribute.errorCode,
        STUNAttribute.unknownAttributes, STUNAttribute.realm, STUNAttribute.nonce, STUNAttribute.xorMappedAddress,
    ]

    /// The bytes to send back to the datagram's source, `ip` (4 or 16 bytes) and `port`; nil to
    /// drop it.
    public static func response(to datagram: [UInt8], fromIP ip: [UInt8], port: UInt16) -> [UInt8]? {
        guard let request = try? STUNMessage(parsing: datagram), request.messageClass == .request,
            request.method == STUNMessage.bindingMethod
        else { return nil }
        let unknown = request.attributes.filter { $0.isComprehensionRequired && !understood.contains($0.type) }.map(\.type)
        var response = STUNMessage(method: STUNMessage.bindingMethod, messageClass: .successResponse, transactionID: request.transactionID)
        if unknown.isEmpty {
            response.attributes = [.xorMappedAddress(ip: ip, port: port, transactionID: request.transactionID)]
        } else {
            response.messageClass = .errorResponse
            response.attributes = [.errorCode(420, reason: "Unknown Attribute"), .unknownAttributes(unknown)]
        }
        return response.encoded(fingerprint: request.hadFingerprint)
    }
}

/// CRC-32 as ISO-HDLC, zlib and STUN's FINGERPRINT compute it (reflected polynomial 0xEDB88320).
enum CRC32 {
    static let table: [UInt32] = (0..<256).map { index in
        var value = UInt32(index)
        for _ in 0..<8 { value = value & 1 == 1 ? 0xEDB8_8320 ^ (value >> 1) : value >> 1 }
        return value
    }

    static func checksum(_ bytes: ArraySlice<UInt8>) -> UInt32 {
        var crc: UInt32 = 0xFFFF_FFFF
        for byte in bytes { crc = table[Int((crc ^ UInt32(byte)) & 0xFF)] ^ (crc >> 8) }
        return crc ^ 0xFFFF_FFFF
    }
}
