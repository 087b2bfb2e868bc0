import Crypto
public import Foundation

/// What a push says happened to a call (decisions.md "Payload keys").
public enum PushEvent: String, Sendable, CaseIterable {
    /// A call is ringing: wake up and REGISTER.
    case ring = "call.ring"
    /// The call was cancelled before anyone answered.
    case canceled = "call.canceled"
    /// The call ended after it was answered (elsewhere).
    case ended = "call.ended"
    /// The call ended unanswered: the app shows a missed call (and stops any ring of it).
    case missed = "call.missed"
    /// The device's registration is about to expire: wake up and REGISTER again (RFC 8599 §5.5).
    case bindingRefresh = "binding.refresh"
}

/// The call facts a ring or cancel push carries. A value; thread-safe.
public struct CallPushContent: Sendable, Equatable {
    /// The SIP Call-ID.
    public var callID: String
    public var callerNumber: String
    public var callerName: String?
    public var calleeNumber: String
    public var calleeName: String?
    /// How long the call may still ring on this device (decisions.md "Ring push expiry").
    public var ringTimeoutSeconds: Int
    public var isVideo: Bool
    /// When the push was made.
    public var timestamp: Date
    /// The call token of the device the ring push goes to (decline, call state); nil for a test push.
    public var callToken: String?
    /// The one-time wake credential of the device the ring push goes to (`wake_credentials`), for
    /// its REGISTER's `X-Rouse-Wake`; nil when the setting is off.
    public var wakeCredential: String?

    public init(
        callID: String, callerNumber: String, callerName: String? = nil, calleeNumber: String, calleeName: String? = nil,
        ringTimeoutSeconds: Int, isVideo: Bool = false, timestamp: Date = Date(), callToken: String? = nil
    ) {
        self.callToken = callToken
        self.callID = callID
        self.callerNumber = callerNumber
        self.callerName = callerName
        self.calleeNumber = calleeNumber
        self.calleeName = calleeName
        self.ringTimeoutSeconds = ringTimeoutSeconds
        self.isVideo = isVideo
        self.timestamp = timestamp
    }

    /// The call's UUID (UUID v5 of the Call-ID in `PushPayload.uuidNamespace`).
    public var uuid: String { PushPayload.uuid(forCallID: callID) }
}

/// A ring or cancel push's payload: one contract for both providers (docs/app-builders.md). Every
/// value is a string, on APNs as on FCM, so an app reads both the same way. A value; thread-safe.
public struct PushPayload: Sendable, Equatable {
    /// The namespace of the call UUIDs: `uuid = UUIDv5(namespace, Call-ID bytes)` (RFC 9562 §5.5).
    /// Fixed forever: apps may compute the same UUID from a Call-ID.
    public static let uuidNamespace = "d46af99e-2b71-4669-a0fd-4dcc7bddc9df"

    public let event: PushEvent
    /// The keys and values, in a fixed order.
    public let data: [(key: String, value: String)]

    public static func == (a: PushPayload, b: PushPayload) -> Bool {
        a.event == b.event && a.data.map(\.key) == b.data.map(\.key) && a.data.map(\.value) == b.data.map(\.value)
    }

    /// The ring push. `test` marks the operator's test push (the app reports it to CallKit and ends it).
    public static func ring(_ call: CallPushContent, test: Bool = false) -> PushPayload {
        var data: [(key: String, value: String)] = [
            ("event", PushEvent.ring.rawValue), ("call_id", call.callID), ("uuid", call.uuid),
            ("caller_number", call.callerNumber),
        ]
        if let name = call.callerName { data.append(("caller_name", name)) }
        data.append(("callee_number", call.calleeNumber))
        if let name = call.calleeName { data.append(("callee_name", name)) }
        data += [
            ("ring_timeout_secs", String(call.ringTimeoutSeconds)), ("is_video", call.isVideo ? "true" : "false"),
            ("timestamp", iso8601(call.timestamp)),
        ]
        if let token = call.callToken { data.append(("call_token", token)) }
        if let credential = call.wakeCredential { data.append(("wake_credential", credential)) }
        if test { data.append(("test", "true")) }
        return PushPayload(event: .ring, data: data)
    }

    /// The missed-call push (`call.missed`): who called, and why nobody answered (`no_answer`,
    /// `caller_hangup`, `busy`).
    public static func missed(_ call: CallPushContent, reason: String) -> PushPayload {
        var data: [(key: String, value: String)] = [
            ("event", PushEvent.missed.rawValue), ("call_id", call.callID), ("uuid", call.uuid), ("caller_number", call.callerNumber),
        ]
        if let name = call.callerName { data.append(("caller_name", name)) }
        data += [("callee_number", call.calleeNumber), ("reason", reason), ("timestamp", iso8601(call.timestamp))]
        return PushPayload(event: .missed, data: data)
    }

    /// The binding-refresh push: the registration of `aor` ends in `expiresInSeconds`.
    public static func bindingRefresh(aor: String, expiresInSeconds: Int, timestamp: Date = Date()) -> PushPayload {
        PushPayload(event: .bindingRefresh, data: [
            ("event", PushEvent.bindingRefresh.rawValue), ("aor", aor), ("expires_in", String(max(0, expiresInSeconds))),
            ("timestamp", iso8601(timestamp)),
        ])
    }

    /// The cancel push (`call.canceled` or `call.ended`) with the ring's call id and UUID.
    public static func cancel(_ call: CallPushContent, event: PushEvent = .canceled, reason: String) -> PushPayload {
        precondition(event != .ring, "a cancel push is call.canceled or call.ended")
        return PushPayload(event: event, data: [
            ("event", event.rawValue), ("call_id", call.callID), ("uuid", call.uuid), ("reason", reason),
            ("timestamp", iso8601(call.timestamp)),
        ])
    }

    /// The value of a key.
    public func value(_ key: String) -> String? { data.first { $0.key == key }?.value }

    /// The APNs body: `{"aps":{}, …}` for a VoIP ring, `{"aps":{"content-available":1}, …}` for a
    /// background (cancel) push.
    public func apnsBody(background: Bool) -> [UInt8] {
        let aps: JSONText = background ? .object([("content-available", .integer(1))]) : .object([])
        return JSONText.object([("aps", aps)] + data.map { ($0.key, .string($0.value)) }).bytes
    }

    /// The APNs body of a visible missed-call notification: a title iOS localises through the
    /// app's `Localizable.strings` (key `Missed call`, shown as is without one), the caller's name
    /// and number as the body, grouped in the `missed-calls` thread.
    public func apnsAlertBody() -> [UInt8] {
        let number = value("caller_number") ?? ""
        let name = value("caller_name").flatMap { $0.isEmpty || $0 == number ? nil : $0 }
        let body = name.map { "\($0) (\(number))" } ?? number
        let alert: JSONText = .object([("title-loc-key", .string("Missed call")), ("title", .string("Missed call")), ("body", .string(body))])
        let aps: JSONText = .object([("alert", alert), ("sound", .string("default")), ("thread-id", .string("missed-calls"))])
        return JSONText.object([("aps", aps)] + data.map { ($0.key, .string($0.value)) }).bytes
    }

    /// The FCM v1 `messages:send` body: data-only, android priority (`high` by default), ttl,
    /// collapse key, and `direct_boot_ok` when asked (delivered before the phone is first unlocked).
    public func fcmBody(token: String, ttlSeconds: Int, collapseKey: String, highPriority: Bool = true, directBootOK: Bool = false) -> [UInt8] {
        var android: [(String, JSONText)] = [
            ("priority", .string(highPriority ? "high" : "normal")), ("ttl", .string("\(max(0, ttlSeconds))s")),
            ("collapse_key", .string(collapseKey)),
        ]
        if directBootOK { android.append(("direct_boot_ok", .bool(true))) }
        return JSONText.object([
            ("message", .object([
                ("token", .string(token)),
                ("data", .object(data.map { ($0.key, .string($0.value)) })),
                ("android", .object(android)),
            ]))
        ]).bytes
    }

    /// UUID v5 of a Call-ID in `uuidNamespace`, lower-case (every call computes one: the namespace
    /// is decoded once, and Foundation writes the text).
    public static func uuid(forCallID callID: String) -> String {
        var bytes = Array(Digest.sha1(uuidNamespaceBytes + Array(callID.utf8)).prefix(16))
        bytes[6] = (bytes[6] & 0x0F) | 0x50
        bytes[8] = (bytes[8] & 0x3F) | 0x80
        let uuid = UUID(uuid: (
            bytes[0], bytes[1], bytes[2], bytes[3], bytes[4], bytes[5], bytes[6], bytes[7],
            bytes[8], bytes[9], bytes[10], bytes[11], bytes[12], bytes[13], bytes[14], bytes[15]))
        return uuid.uuidString.lowercased()
    }

    private static let uuidNamespaceBytes = withUnsafeBytes(of: UUID(uuidString: uuidNamespace)!.uuid) { Array($0) }

    /// ISO-8601 in UTC with milliseconds: `2025-01-31T09:15:02.123Z`.
    static func iso8601(_ date: Date) -> String {
        date.formatted(Date.ISO8601FormatStyle(includingFractionalSeconds: true, timeZone: TimeZone(identifier: "UTC")!))
    }
}

/// A small JSON writer that keeps members in the given order (payloads read the same every time,
/// which golden tests compare). A value; thread-safe.
indirect enum JSONText: Sendable {
    case string(String)
    case integer(Int64)
    case bool(Bool)
    case object([(String, JSONText)])

    var bytes: [UInt8] { Array(text.utf8) }

    var text: String {
        switch self {
        case .string(let value): return JSONString.quoted(value)
        case .integer(let value): return String(value)
        case .bool(let value): return value ? "true" : "false"
        case .object(let members):
            return "{" + members.map { JSONString.quoted($0.0) + ":" + $0.1.text }.joined(separator: ",") + "}"
        }
    }
}
