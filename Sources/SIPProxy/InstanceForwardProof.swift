import Crypto
public import Foundation
import RouseVocabulary
public import SIPMessage
public import SIPTransport

/// Proves that an INVITE arriving at one Rouse instance was forwarded by another instance of the
/// same deployment, for one binding the receiving instance holds (issue 17 item 3). The
/// forwarding instance has already authenticated the caller; the receiving one then forwards the
/// INVITE to the binding's own flow without challenging it again.
///
/// The proof travels as URI parameters of the Route entry naming the receiving instance
/// (`rouse-b=<binding id>;rouse-p=<seconds>.<hex MAC>`), which that instance removes (RFC 3261
/// §16.4) before sending the request on, so no phone ever sees it. The MAC is HMAC-SHA256 (first
/// 16 bytes) under a secret the instances share through PostgreSQL, over the binding id, the
/// Call-ID, the CSeq, the Request-URI, the top Via branch (the forwarding instance's own) and the
/// time it was made. A proof is good for `validity` seconds either side of the receiver's clock
/// and once only (`ForwardProofChecker`). Trust is never taken from an address.
///
/// A value, safe to share between threads.
public struct InstanceForwardProof: Sendable {
    /// The Route URI parameter naming the binding the request is for.
    public static let bindingParameter = "rouse-b"
    /// The Route URI parameter carrying `<seconds since 1970>.<hex MAC>`.
    public static let proofParameter = "rouse-p"
    /// How far (seconds) a proof's time may be from the receiver's clock, either way: a forwarded
    /// INVITE arrives within milliseconds; the rest is room for clocks a little apart.
    static let validity: TimeInterval = 30

    private let key: [UInt8]

    /// The Route entry that sends a request through the instance listening at `point`, for
    /// `binding`, with `proof` (a `sign` value): `<sip:host:port;transport=…;lr;rouse-b=…;rouse-p=…>`.
    /// That instance pops it (`ProxyCore.popOwnRoutes`) and finds the binding and the proof.
    public static func routeEntry(to point: ListenPoint, binding: UUID, proof: String) -> String {
        let host = point.isIPv6 ? "[\(point.host)]" : point.host
        let transportParameter = point.transport == .udp ? "" : ";transport=\(point.transport.rawValue)"
        return "<sip:\(host):\(point.port)\(transportParameter);lr;\(bindingParameter)=\(binding.uuidString.lowercased());\(proofParameter)=\(proof)>"
    }

    /// - Parameter secret: the deployment's shared secret (`instance_forward_secret` in
    ///   `rouse_settings`); a key of its own is derived from it, used for nothing else.
    public init(secret: [UInt8]) {
        key = Digest.hmacSHA256(key: secret, message: Array("rouse instance forward proof v1".utf8))
    }

    /// The `rouse-p` value for `request` (as it will be sent, with the forwarding instance's Via on
    /// top) towards `binding`, made at `now`. Nil when the request lacks a Call-ID, CSeq or branch.
    public func sign(_ request: SIPRequest, binding: UUID, at now: Date) -> String? {
        let seconds = Int64(now.timeIntervalSince1970.rounded(.down))
        guard let message = Self.message(request, binding: binding, seconds: seconds) else { return nil }
        return "\(seconds).\(Hex.encode(mac(message)))"
    }

    /// Why a proof was not accepted.
    public enum Refusal: String, Error, Equatable {
        /// Not of the `<seconds>.<hex>` shape, or the request lacks what the MAC covers.
        case malformed
        /// The MAC does not match: made without the secret, or for another request or binding.
        case forged
        /// Made more than `validity` seconds from now.
        case stale
        /// Already used once.
        case replayed
    }

    /// Checks `proof` (a `rouse-p` value) against `request` as it arrived and the binding it names,
    /// at `now`: the MAC in constant time, then the time. Returns the MAC, the proof's identity for
    /// the replay check.
    func verify(_ proof: String, of request: SIPRequest, binding: UUID, at now: Date) -> Result<String, Refusal> {
        let parts = proof.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 2, let seconds = Int64(parts[0]), let given = Hex.decode(String(parts[1])), given.count == 16,
            let message = Self.message(request, binding: binding, seconds: seconds)
        else { return .failure(.malformed) }
        guard Digest.constantTimeEquals(mac(message), given) else { return .failure(.forged) }
        guard abs(now.timeIntervalSince1970 - Double(seconds)) <= Self.validity else { return .failure(.stale) }
        return .success(String(parts[1]).lowercased())
    }

    private func mac(_ message: [UInt8]) -> [UInt8] {
        Array(Digest.hmacSHA256(key: key, message: message).prefix(16))
    }

    /// What the MAC covers, one field a line (none of them can hold a line break once parsed).
    private static func message(_ request: SIPRequest, binding: UUID, seconds: Int64) -> [UInt8]? {
        guard let callID = request.callID, let cseq = request.cseq, let branch = request.topVia?.branch else { return nil }
        let fields = [
            String(seconds), binding.uuidString.lowercased(), callID, "\(cseq.number) \(cseq.method.rawValue)", request.uri.description, branch,
        ]
        return Array(fields.joined(separator: "\n").utf8)
    }
}

/// Checks forwarded INVITEs' proofs and remembers the ones accepted for as long as they are valid,
/// so each is accepted once (a retransmission never gets here: its server transaction absorbs it).
/// Bounded: at most `limit` proofs are remembered; when full, the oldest goes.
///
/// Threading: a value; `SIPService` keeps it behind a lock. Time is passed in.
struct ForwardProofChecker {
    let proof: InstanceForwardProof
    private var accepted: ExpiringTable<String, Bool>

    init(proof: InstanceForwardProof, limit: Int = 100_000) {
        self.proof = proof
        accepted = ExpiringTable(limit: limit, maxAge: 2 * InstanceForwardProof.validity)
    }

    /// Accepts `value` (a `rouse-p`) for `request` and `binding` once, at `now`: nil when
    /// accepted, else why not.
    mutating func check(_ value: String, of request: SIPRequest, binding: UUID, at now: Date) -> InstanceForwardProof.Refusal? {
        accepted.prune(now: now)
        switch proof.verify(value, of: request, binding: binding, at: now) {
        case .failure(let refusal):
            return refusal
        case .success(let identity):
            guard accepted[identity] == nil else { return .replayed }
            accepted.insert(true, for: identity, at: now)
            return nil
        }
    }

    /// How many accepted proofs are remembered now.
    var remembered: Int { accepted.count }
}

/// The service's `ForwardProofChecker` behind a lock. Thread-safe; a check is two HMACs and a
/// table lookup, cheap enough for the SIP loop thread.
public final class ForwardProofs: @unchecked Sendable {
    // @unchecked: `checker` is only touched under `lock`.
    private let lock = NSLock()
    private var checker: ForwardProofChecker
    public let proof: InstanceForwardProof

    public init(secret: [UInt8]) {
        proof = InstanceForwardProof(secret: secret)
        checker = ForwardProofChecker(proof: proof)
    }

    public func check(_ value: String, of request: SIPRequest, binding: UUID, at now: Date) -> InstanceForwardProof.Refusal? {
        lock.lock()
        defer { lock.unlock() }
        return checker.check(value, of: request, binding: binding, at: now)
    }
}
