import COpenSSL
import Glibc

/// A digest as bytes held inline (at most 32: SHA-256), so a hash needs no array. A value.
public struct DigestOutput: Sendable, Equatable {
    private var words: (UInt64, UInt64, UInt64, UInt64) = (0, 0, 0, 0)
    /// How many bytes of the 32 are the digest (16 for MD5, 32 for SHA-256).
    public private(set) var count: Int = 0

    init(filling body: (UnsafeMutableRawBufferPointer) -> Int) {
        count = withUnsafeMutableBytes(of: &words) { body($0) }
    }

    /// A digest read back from where it was kept as bytes (at most 32).
    public init(copying bytes: UnsafeRawBufferPointer) {
        precondition(bytes.count <= 32, "a digest is at most 32 bytes")
        self.init { out in
            out.copyMemory(from: bytes)
            return bytes.count
        }
    }

    public static func == (lhs: DigestOutput, rhs: DigestOutput) -> Bool {
        lhs.count == rhs.count && lhs.withUnsafeBytes { a in rhs.withUnsafeBytes { b in a.elementsEqual(b) } }
    }

    /// The digest's bytes (only its `count` first).
    public func withUnsafeBytes<R>(_ body: (UnsafeRawBufferPointer) throws -> R) rethrows -> R {
        try Swift.withUnsafeBytes(of: words) { try body(UnsafeRawBufferPointer(rebasing: $0.prefix(count))) }
    }

    public var bytes: [UInt8] { withUnsafeBytes { Array($0) } }

    /// Lower-case hex, as SIP digest exchanges it.
    public var hex: String {
        String(unsafeUninitializedCapacity: count * 2) { out in writeHex(into: UnsafeMutableRawBufferPointer(out)) }
    }

    /// Writes lower-case hex into `out` (at least `2 * count` bytes); returns the bytes written.
    @discardableResult
    public func writeHex(into out: UnsafeMutableRawBufferPointer) -> Int {
        precondition(out.count >= 2 * count, "room for the hex of the digest")
        withUnsafeBytes { digest in
            var at = 0
            for byte in digest {
                out.storeBytes(of: Hex.digit(byte >> 4), toByteOffset: at, as: UInt8.self)
                out.storeBytes(of: Hex.digit(byte & 0x0F), toByteOffset: at + 1, as: UInt8.self)
                at += 2
            }
        }
        return count * 2
    }

    /// The digest `text` spells in hex (either case) when it is that of an MD5 or SHA-256 (32 or
    /// 64 digits); nil otherwise.
    public init?(hex text: String) {
        var text = text
        let parsed = text.withUTF8 { hex -> DigestOutput? in
            guard hex.count == 32 || hex.count == 64 else { return nil }
            var valid = true
            let output = DigestOutput { out in
                for index in 0..<hex.count / 2 {
                    guard let high = Hex.value(hex[2 * index]), let low = Hex.value(hex[2 * index + 1]) else {
                        valid = false
                        return 0
                    }
                    out[index] = high << 4 | low
                }
                return hex.count / 2
            }
            return valid ? output : nil
        }
        guard let parsed else { return nil }
        self = parsed
    }

    /// Whether `text` is this digest in hex (either case), in time that depends only on the lengths.
    public func matchesHex(_ text: Substring) -> Bool {
        var text = text
        return text.withUTF8 { hex in withUnsafeBytes { Hex.matches($0, hex: UnsafeRawBufferPointer(hex)) } }
    }
}

extension DigestOutput: Hashable {
    public func hash(into hasher: inout Hasher) {
        withUnsafeBytes { hasher.combine(bytes: $0) }
    }
}

/// An incremental hash (one OpenSSL `EVP_MD_CTX`): `a:b:c` is hashed piece by piece, never built
/// as a String. Owned by one caller at a time (not copyable).
///
/// Its context is the calling thread's spare one when there is one (`SpareDigestContext`), begun
/// again with `EVP_DigestInit_ex2` on the algorithm fetched once, and handed back when the hash
/// ends: a hash costs no context allocation. A context is only ever held by one stream.
public struct DigestStream: ~Copyable {
    private let context: OpaquePointer

    public init(_ algorithm: Digest.Algorithm) {
        context = SpareDigestContext.take()
        let ok = EVP_DigestInit_ex2(context, algorithm.evp, nil)
        precondition(ok == 1, "EVP_DigestInit_ex2 failed for \(algorithm.rawValue)")
    }

    /// Continues from a context holding a hash already begun (an HMAC key's padded block).
    init(copying template: OpaquePointer) {
        context = SpareDigestContext.take()
        let ok = EVP_MD_CTX_copy_ex(context, template)
        precondition(ok == 1, "EVP_MD_CTX_copy_ex failed")
    }

    /// A hash dropped unfinished: its state is wiped (as `EVP_MD_CTX_free` would) before the
    /// context is handed back.
    deinit {
        EVP_MD_CTX_reset(context)
        SpareDigestContext.give(context)
    }

    public mutating func update(_ bytes: UnsafeRawBufferPointer) {
        guard let base = bytes.baseAddress, !bytes.isEmpty else { return }
        _ = EVP_DigestUpdate(context, base, bytes.count)
    }

    /// Hashes a text's UTF-8 bytes.
    public mutating func update(_ text: Substring) {
        var text = text
        text.withUTF8 { update(UnsafeRawBufferPointer($0)) }
    }

    public mutating func update(_ text: String) {
        var text = text
        text.withUTF8 { update(UnsafeRawBufferPointer($0)) }
    }

    public mutating func update(byte: UInt8) {
        Swift.withUnsafeBytes(of: byte) { update($0) }
    }

    /// Hashes `digest` written as lower-case hex (HA1 and HA2 enter the response so).
    public mutating func update(hexOf digest: DigestOutput) {
        withUnsafeTemporaryAllocation(byteCount: 64, alignment: 1) { buffer in
            let written = digest.writeHex(into: buffer)
            update(UnsafeRawBufferPointer(rebasing: buffer.prefix(written)))
        }
    }

    /// The digest. The algorithm's final step wipes its state, so the context goes back as it is.
    public consuming func finish() -> DigestOutput {
        let context = self.context
        discard self
        let output = DigestOutput { out in
            var length: UInt32 = 0
            let ok = EVP_DigestFinal_ex(context, out.baseAddress?.assumingMemoryBound(to: UInt8.self), &length)
            precondition(ok == 1, "EVP_DigestFinal_ex failed")
            return Int(length)
        }
        SpareDigestContext.give(context)
        return output
    }
}

/// One spare `EVP_MD_CTX` per thread, in a pthread key: `DigestStream` takes it (leaving the slot
/// empty, so a stream begun while another is open on the same thread makes a context of its own)
/// and gives it back when done (freed instead when the slot was filled meanwhile). No context is
/// ever shared between threads or between two open streams, so no lock is needed; a thread's
/// spare is freed when the thread ends.
enum SpareDigestContext {
    private static let key: pthread_key_t = {
        var key = pthread_key_t()
        let made = pthread_key_create(&key) { spare in EVP_MD_CTX_free(OpaquePointer(spare)) }
        precondition(made == 0, "pthread_key_create failed")
        return key
    }()

    static func take() -> OpaquePointer {
        guard let spare = pthread_getspecific(key) else { return EVP_MD_CTX_new() }
        pthread_setspecific(key, nil)
        return OpaquePointer(spare)
    }

    static func give(_ context: OpaquePointer) {
        if pthread_getspecific(key) == nil, pthread_setspecific(key, UnsafeRawPointer(context)) == 0 { return }
        EVP_MD_CTX_free(context)
    }
}

/// An HMAC-SHA256 key made ready once (RFC 2104): the inner and outer padded blocks are hashed at
/// `init`, so each MAC costs two short hashes and no key schedule or algorithm fetch.
///
/// Threading: immutable after `init`; `mac` may be called from any thread.
public final class HMACSHA256Key: @unchecked Sendable {
    // @unchecked: the two contexts are written only in `init` and only copied from afterwards.
    private let inner: OpaquePointer
    private let outer: OpaquePointer

    public init(_ key: [UInt8]) {
        var block = [UInt8](repeating: 0, count: 64)
        if key.count > 64 {
            Digest.hash(.sha256, key).withUnsafeBytes { block.replaceSubrange(0..<32, with: $0) }
        } else {
            block.replaceSubrange(0..<key.count, with: key)
        }
        func padded(_ pad: UInt8) -> OpaquePointer {
            let context = EVP_MD_CTX_new()!
            let ok = EVP_DigestInit_ex(context, Digest.Algorithm.sha256.evp, nil)
            precondition(ok == 1, "EVP_DigestInit_ex failed for SHA-256")
            let bytes = block.map { $0 ^ pad }
            _ = bytes.withUnsafeBytes { EVP_DigestUpdate(context, $0.baseAddress, $0.count) }
            return context
        }
        inner = padded(0x36)
        outer = padded(0x5C)
    }

    deinit {
        EVP_MD_CTX_free(inner)
        EVP_MD_CTX_free(outer)
    }

    public func mac(_ message: UnsafeRawBufferPointer) -> DigestOutput {
        var first = DigestStream(copying: inner)
        first.update(message)
        let innerDigest = first.finish()
        var second = DigestStream(copying: outer)
        innerDigest.withUnsafeBytes { second.update($0) }
        return second.finish()
    }

    public func mac(_ message: [UInt8]) -> DigestOutput {
        message.withUnsafeBytes { mac($0) }
    }
}

extension Hex {
    /// Whether `hex` spells `bytes` (either case), in time that depends only on the lengths. On
    /// raw buffers, not generic: called across modules, a generic one ran unspecialised.
    public static func matches(_ bytes: UnsafeRawBufferPointer, hex text: UnsafeRawBufferPointer) -> Bool {
        guard text.count == bytes.count * 2 else { return false }
        var difference: UInt8 = 0
        var valid = true
        for index in 0..<bytes.count {
            let high = value(text[2 * index])
            let low = value(text[2 * index + 1])
            valid = valid && high != nil && low != nil
            difference |= bytes[index] ^ ((high ?? 0) << 4 | (low ?? 0))
        }
        return valid && difference == 0
    }

    /// The lower-case hex digit of a nibble.
    @inline(__always)
    static func digit(_ nibble: UInt8) -> UInt8 {
        nibble < 10 ? 0x30 + nibble : 0x61 - 10 + nibble
    }
}
