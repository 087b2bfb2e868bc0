import Foundation
import Glibc

/// A set of IP networks, each an address and a prefix length (CIDR blocks, IPv4 or IPv6), and the
/// question whether an address lies in one of them. An IPv4-mapped IPv6 address
/// (`::ffff:192.0.2.10`) is the IPv4 address it maps, in an entry and in a question alike. A value,
/// safe to share between threads.
public struct IPPrefixSet: Sendable, Equatable {
    struct Network: Sendable, Equatable {
        var address: [UInt8]
        var prefixLength: Int
    }

    private var networks: [Network]

    /// An empty set holds no address.
    public init() { networks = [] }

    /// Parses `192.0.2.10`, `10.0.0.0/8`, `2001:db8::/32` (an address alone is a whole-length
    /// prefix); blank entries are skipped. Throws naming the first bad entry.
    public init(parsing entries: [String]) throws(IPPrefixSetError) {
        networks = []
        for entry in entries {
            let trimmed = entry.trimmingCharacters(in: .whitespaces)
            guard !trimmed.isEmpty else { continue }
            let parts = trimmed.split(separator: "/", maxSplits: 1).map(String.init)
            guard let full = Self.rawBytes(of: parts[0]) else { throw IPPrefixSetError(entry: entry) }
            let bits = full.count * 8
            var prefix = bits
            if parts.count == 2 {
                guard let value = Int(parts[1]), (0...bits).contains(value) else { throw IPPrefixSetError(entry: entry) }
                prefix = value
            }
            if let v4 = Self.unmapped(full), prefix >= 96 {
                networks.append(Network(address: v4, prefixLength: prefix - 96))
            } else {
                networks.append(Network(address: full, prefixLength: prefix))
            }
        }
    }

    public var isEmpty: Bool { networks.isEmpty }

    /// Whether `text` is an IPv4 or IPv6 address literal (brackets allowed).
    public static func isIPAddress(_ text: String) -> Bool {
        bytes(of: text) != nil
    }

    /// Whether `ip` (a literal, brackets allowed) lies in one of the networks.
    public func contains(_ ip: String) -> Bool {
        guard let address = Self.bytes(of: ip) else { return false }
        return networks.contains { network in
            guard network.address.count == address.count else { return false }
            var remaining = network.prefixLength
            for index in address.indices where remaining > 0 {
                let take = min(8, remaining)
                let mask = UInt8(truncatingIfNeeded: 0xFF << (8 - take))
                if address[index] & mask != network.address[index] & mask { return false }
                remaining -= take
            }
            return true
        }
    }

    /// An address literal (brackets allowed) in network byte order, an IPv4-mapped IPv6 address as
    /// its 4 IPv4 bytes; nil when `text` is no address.
    static func bytes(of text: String) -> [UInt8]? {
        var literal = text
        if literal.hasPrefix("["), literal.hasSuffix("]") { literal = String(literal.dropFirst().dropLast()) }
        guard let full = rawBytes(of: literal) else { return nil }
        return unmapped(full) ?? full
    }

    private static func rawBytes(of literal: String) -> [UInt8]? {
        var v4 = in_addr()
        if inet_pton(AF_INET, literal, &v4) == 1 {
            return withUnsafeBytes(of: &v4) { Array($0) }
        }
        var v6 = in6_addr()
        if inet_pton(AF_INET6, literal, &v6) == 1 {
            return withUnsafeBytes(of: &v6) { Array($0) }
        }
        return nil
    }

    /// The IPv4 address an IPv4-mapped IPv6 address (`::ffff:a.b.c.d`, RFC 4291 §2.5.5.2) stands for.
    private static func unmapped(_ bytes: [UInt8]) -> [UInt8]? {
        guard bytes.count == 16, bytes[0..<10].allSatisfy({ $0 == 0 }), bytes[10] == 0xFF, bytes[11] == 0xFF else { return nil }
        return Array(bytes[12...])
    }
}

/// An entry of an `IPPrefixSet` that is neither an IP address nor a CIDR block.
public struct IPPrefixSetError: Error, Equatable, CustomStringConvertible {
    public let entry: String
    public var description: String { "\"\(entry)\" is not an IP address or CIDR block (e.g. 192.0.2.10, 10.0.0.0/8, 2001:db8::/32)" }
}

/// Addresses allowed to skip a check: the peers whose INVITEs need no digest authentication
/// (setting `trusted_peers`), the reverse proxies whose `X-Forwarded-For` is believed
/// (`http_trusted_proxies`). A value.
public typealias TrustedPeers = IPPrefixSet
