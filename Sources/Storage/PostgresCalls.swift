public import CallRouting
public import Foundation
import Push
public import Registrar
import RouseVocabulary

/// The `calls` table read back as `CallJourney` values (the admin API's call list and call detail),
/// and the journey's JSON as the table keeps it. `PostgresJourneyStore` writes it.
///
/// Threading: stateless; each reader runs on a connection the caller owns, blocking its thread.
public enum PostgresCalls {
    /// The latest calls, newest first: of one extension when `aor` is given, only those that
    /// started before `before` when given (the cursor of the next page: the last call's `startedAt`),
    /// and only missed (or only not missed) calls when `missed` is given.
    public static func recent(
        on connection: PostgresConnection, aor: AddressOfRecord? = nil, limit: Int = 50, before: Date? = nil, missed: Bool? = nil
    ) throws -> [CallJourney] {
        let rows = try connection.query(
            selectSQL + """
                WHERE ($1::text IS NULL OR aor = $1) AND ($2::timestamptz IS NULL OR started_at < $2::timestamptz)
                    AND ($4::boolean IS NULL OR (coalesce(journey->>'missed', '0') = '1') = $4::boolean)
                ORDER BY started_at DESC, id DESC LIMIT $3::integer
                """,
            [aor?.description, before.map(MillisecondTime.string), String(max(0, limit)), missed.map { $0 ? "true" : "false" }])
        return try withLatestWakes(rows.rows.indices.compactMap { journey(from: rows, row: $0) }, on: connection)
    }

    /// One call by its id, or nil when there is none.
    public static func journey(id: UUID, on connection: PostgresConnection) throws -> CallJourney? {
        let rows = try connection.query(selectSQL + "WHERE id = $1::uuid", [id.uuidString])
        guard !rows.isEmpty, let journey = journey(from: rows, row: 0) else { return nil }
        return try withLatestWakes([journey], on: connection).first
    }

    /// The journeys with each push's latest wake result: a device that came back after the call
    /// was recorded (`late`) is in its push record, written after the journey.
    private static func withLatestWakes(_ journeys: [CallJourney], on connection: PostgresConnection) throws -> [CallJourney] {
        let ids = journeys.filter { !$0.pushes.isEmpty }.map(\.id)
        guard !ids.isEmpty else { return journeys }
        let rows = try connection.query(
            """
            SELECT record_uuid::text AS id, wake, woke_after_ms FROM push_records
            WHERE call_uuid = ANY($1::uuid[]) AND record_uuid IS NOT NULL AND wake IS NOT NULL
            """,
            [BindingRecords.uuidArray(ids)])
        var latest: [UUID: WakeResult] = [:]
        for row in rows.rows.indices {
            guard let id = rows.value(row, "id").flatMap(UUID.init(uuidString:)), let word = rows.value(row, "wake") else { continue }
            latest[id] = WakeResult(word: word, milliseconds: rows.value(row, "woke_after_ms").flatMap { Int($0) })
        }
        return journeys.map { journey in
            var updated = journey
            for index in updated.pushes.indices {
                if let wake = latest[updated.pushes[index].id] { updated.pushes[index].wake = wake }
            }
            return updated
        }
    }

    private static let selectSQL = """
        SELECT id::text AS id, call_id, uuid, aor, caller, caller_name, transport, source, instance_id,
            extract(epoch FROM started_at)::double precision AS started_at,
            extract(epoch FROM answered_at)::double precision AS answered_at,
            extract(epoch FROM ended_at)::double precision AS ended_at,
            outcome, final_status, reason, answered_by, journey::text AS journey
        FROM calls

        """

    /// A row rebuilt as a journey; nil when its id or start is not readable.
    static func journey(from rows: PostgresRows, row: Int) -> CallJourney? {
        guard let id = rows.value(row, "id").flatMap(UUID.init(uuidString:)), let startedAt = epochDate(rows.value(row, "started_at"))
        else { return nil }
        let aorText = rows.value(row, "aor") ?? ""
        let callee = AddressOfRecord(parsing: aorText) ?? Self.address(aorText)
        let callID = rows.value(row, "call_id") ?? ""
        var journey = CallJourney(
            id: id, callID: callID, callee: callee, caller: rows.value(row, "caller") ?? "", callerName: rows.value(row, "caller_name"),
            transport: rows.value(row, "transport") ?? "", source: rows.value(row, "source") ?? "",
            instanceID: rows.value(row, "instance_id") ?? "", startedAt: startedAt)
        if let uuid = rows.value(row, "uuid") { journey.uuid = uuid }
        journey.answeredAt = epochDate(rows.value(row, "answered_at"))
        journey.endedAt = epochDate(rows.value(row, "ended_at"))
        journey.outcome = rows.value(row, "outcome").flatMap(CallOutcome.init(rawValue:)) ?? .ringing
        journey.finalStatus = rows.value(row, "final_status").flatMap { Int($0) }
        journey.reason = rows.value(row, "reason")
        journey.answeredBy = rows.value(row, "answered_by")
        JourneyJSON.decode(rows.value(row, "journey") ?? "{}", into: &journey)
        return journey
    }

    /// An address that does not parse any more, kept as written: number before the last `@`.
    private static func address(_ text: String) -> AddressOfRecord {
        guard let at = text.lastIndex(of: "@") else { return AddressOfRecord(number: text, domain: "") }
        return AddressOfRecord(number: String(text[..<at]), domain: String(text[text.index(after: at)...]))
    }

    /// Seconds since 1970 as PostgreSQL's `extract(epoch …)` gives them, to the millisecond.
    static func epochDate(_ text: String?) -> Date? {
        guard let text, let seconds = Double(text), seconds.isFinite else { return nil }
        return MillisecondTime.rounded(Date(timeIntervalSince1970: seconds))
    }
}

/// The `journey` column of `calls`: the pushes, branches and events of a call as JSON, with times
/// as ISO 8601 in UTC to the millisecond. Keys are snake_case so PostgreSQL can unpack the pushes
/// with `jsonb_to_recordset` (a push's `id` is its push record's `record_uuid`).
///
/// Threading: stateless.
enum JourneyJSON {
    /// A row of `calls` as `PostgresJourneyStore.upsertCallsSQL` unpacks it: its columns, and the
    /// journey object in `journey`.
    static func writeRow(_ journey: CallJourney, into json: inout JSONText) {
        json.beginObject()
        json.field("id", uuid: journey.id)
        json.field("call_id", storable(journey.callID))
        json.field("uuid", storable(journey.uuid))
        json.field("aor", storable(journey.callee.description))
        json.field("caller", storable(journey.caller))
        json.field("caller_name", journey.callerName.map(storable))
        json.field("transport", storable(journey.transport))
        json.field("source", storable(journey.source))
        json.field("instance_id", storable(journey.instanceID))
        json.field("started_at", MillisecondTime.string(journey.startedAt))
        json.field("answered_at", journey.answeredAt.map(MillisecondTime.string))
        json.field("ended_at", journey.endedAt.map(MillisecondTime.string))
        json.field("outcome", journey.outcome.rawValue)
        json.field("final_status", journey.finalStatus)
        json.field("reason", journey.reason.map(storable))
        json.field("answered_by", journey.answeredBy.map(storable))
        json.field("ring_ms", journey.ringMilliseconds)
        json.key("journey")
        write(journey, into: &json)
        json.endObject()
    }

    /// The `journey` column's object.
    private static func write(_ journey: CallJourney, into json: inout JSONText) {
        json.beginObject()
        // JSONText writes no booleans: 1 for a missed call, 0 otherwise.
        json.field("missed", journey.missed ? 1 : 0)
        json.key("pushes")
        json.beginArray()
        for push in journey.pushes {
            json.beginObject()
            json.field("id", uuid: push.id)
            json.field("device", storable(push.device))
            json.field("provider", push.provider.rawValue)
            json.field("app_id", push.appID.map { Int($0) })
            json.field("token_short", storable(push.tokenShort))
            json.field("outcome", storable(push.outcome))
            json.field("status", push.status)
            json.field("reason", push.reason.map(storable))
            json.field("explanation", storable(push.explanation))
            json.field("latency_ms", push.latencyMilliseconds)
            json.field("sent_at", MillisecondTime.string(push.sentAt))
            json.field("wake", push.wake.word)
            json.field("woke_after_ms", push.wake.milliseconds)
            json.endObject()
        }
        json.endArray()
        json.key("branches")
        json.beginArray()
        for branch in journey.branches {
            json.beginObject()
            json.field("binding_id", uuid: branch.bindingID)
            json.field("target", storable(branch.target))
            json.field("device", storable(branch.device))
            json.field("transport", storable(branch.transport))
            json.field("started_at", MillisecondTime.string(branch.startedAt))
            // JSONText writes no booleans: 1 for a late fork, 0 otherwise.
            json.field("late_fork", branch.isLateFork ? 1 : 0)
            json.key("responses")
            json.beginArray()
            for response in branch.responses {
                json.beginObject()
                json.field("status", response.status)
                json.field("reason", storable(response.reason))
                json.field("at", MillisecondTime.string(response.at))
                json.endObject()
            }
            json.endArray()
            json.field("canceled_because", branch.canceledBecause.map(storable))
            json.field("ended_at", branch.endedAt.map(MillisecondTime.string))
            json.endObject()
        }
        json.endArray()
        json.key("events")
        json.beginArray()
        for event in journey.events {
            json.beginObject()
            json.field("at", MillisecondTime.string(event.at))
            json.field("text", storable(event.text))
            json.endObject()
        }
        json.endArray()
        json.endObject()
    }

    /// Sets `journey`'s pushes, branches and events from the stored JSON; an element that does not
    /// read (no id, no time) is left out rather than guessed.
    static func decode(_ text: String, into journey: inout CallJourney) {
        guard let parsed = try? JSONSerialization.jsonObject(with: Data(text.utf8)), let object = parsed as? [String: Any] else { return }
        journey.missed = (object["missed"] as? Int) == 1
        journey.pushes = (object["pushes"] as? [[String: Any]] ?? []).compactMap(push)
        journey.branches = (object["branches"] as? [[String: Any]] ?? []).compactMap(branch)
        journey.events = (object["events"] as? [[String: Any]] ?? []).compactMap { item in
            guard let at = time(item["at"]) else { return nil }
            return JourneyEvent(at: at, text: item["text"] as? String ?? "")
        }
    }

    private static func push(_ item: [String: Any]) -> JourneyPush? {
        guard let id = (item["id"] as? String).flatMap(UUID.init(uuidString:)), let sentAt = time(item["sent_at"]) else { return nil }
        return JourneyPush(
            id: id, device: item["device"] as? String ?? "",
            provider: (item["provider"] as? String).flatMap(PushProvider.init(rawValue:)) ?? .apns,
            appID: (item["app_id"] as? Int).map { Int64($0) }, tokenShort: item["token_short"] as? String ?? "",
            outcome: item["outcome"] as? String ?? "", status: item["status"] as? Int, reason: item["reason"] as? String,
            explanation: item["explanation"] as? String ?? "", latencyMilliseconds: item["latency_ms"] as? Int ?? 0, sentAt: sentAt,
            wake: WakeResult(word: item["wake"] as? String ?? "", milliseconds: item["woke_after_ms"] as? Int))
    }

    private static func branch(_ item: [String: Any]) -> JourneyBranch? {
        guard let bindingID = (item["binding_id"] as? String).flatMap(UUID.init(uuidString:)), let startedAt = time(item["started_at"])
        else { return nil }
        let responses: [JourneyResponse] = (item["responses"] as? [[String: Any]] ?? []).compactMap { response in
            guard let status = response["status"] as? Int, let at = time(response["at"]) else { return nil }
            return JourneyResponse(status: status, reason: response["reason"] as? String ?? "", at: at)
        }
        return JourneyBranch(
            bindingID: bindingID, target: item["target"] as? String ?? "", device: item["device"] as? String ?? "",
            transport: item["transport"] as? String ?? "", startedAt: startedAt, isLateFork: (item["late_fork"] as? Int ?? 0) != 0,
            responses: responses, canceledBecause: item["canceled_because"] as? String, endedAt: time(item["ended_at"]))
    }

    private static func time(_ value: Any?) -> Date? {
        (value as? String).flatMap(MillisecondTime.date)
    }

    /// Text PostgreSQL can hold: `jsonb` refuses `\u0000`, so NUL characters are written `%00`.
    /// Looked for in the string's bytes first: a journey writes some twenty strings per call,
    /// nearly all without one.
    static func storable(_ text: String) -> String {
        var bytes = text
        guard bytes.withUTF8({ $0.contains(0) }) else { return text }
        return StorableText.escapingNUL(text)
    }
}

/// Times as calls and journeys are stored and shown: ISO 8601 in UTC with milliseconds
/// (`2026-11-29T10:00:00.123Z`). Dates are rounded to the millisecond (and kept within years
/// 1–9999), so a time written and read back is equal to the rounded original.
///
/// Threading: stateless.
public enum MillisecondTime {
    /// Milliseconds since 1970 of 0001-01-01T00:00:00.000Z and of 9999-12-31T23:59:59.999Z.
    static let earliest: Int64 = -62_135_596_800_000
    static let latest: Int64 = 253_402_300_799_999

    /// `date` to the nearest millisecond.
    public static func rounded(_ date: Date) -> Date {
        Date(timeIntervalSince1970: Double(milliseconds(date)) / 1000)
    }

    /// `2026-11-29T10:00:00.123Z`.
    public static func string(_ date: Date) -> String {
        let total = milliseconds(date)
        let millisecond = Int(((total % 1000) + 1000) % 1000)
        let seconds = (total - Int64(millisecond)) / 1000
        let secondOfDay = Int(((seconds % 86_400) + 86_400) % 86_400)
        let days = (seconds - Int64(secondOfDay)) / 86_400
        // Days since 1970 to a civil date (H. Hinnant's algorithm, proleptic Gregorian calendar).
        let shifted = days + 719_468
        let era = (shifted >= 0 ? shifted : shifted - 146_096) / 146_097
        let dayOfEra = shifted - era * 146_097
        let yearOfEra = (dayOfEra - dayOfEra / 1460 + dayOfEra / 36_524 - dayOfEra / 146_096) / 365
        let dayOfYear = dayOfEra - (365 * yearOfEra + yearOfEra / 4 - yearOfEra / 100)
        let monthIndex = (5 * dayOfYear + 2) / 153
        let day = dayOfYear - (153 * monthIndex + 2) / 5 + 1
        let month = monthIndex < 10 ? monthIndex + 3 : monthIndex - 9
        let year = yearOfEra + era * 400 + (month <= 2 ? 1 : 0)
        // Written digit by digit into the string's own 24 bytes (a journey writes dozens of times
        // per call; joining padded pieces cost several thousand instructions each, and a table of
        // the fields an allocation each).
        return String(unsafeUninitializedCapacity: 24) { out in
            var at = 0
            func put(_ value: Int, _ width: Int, _ after: UInt8) {
                var value = value
                for index in stride(from: at + width - 1, through: at, by: -1) {
                    out[index] = UInt8(truncatingIfNeeded: 0x30 + value % 10)
                    value /= 10
                }
                out[at + width] = after
                at += width + 1
            }
            put(Int(year), 4, UInt8(ascii: "-"))
            put(Int(month), 2, UInt8(ascii: "-"))
            put(Int(day), 2, UInt8(ascii: "T"))
            put(secondOfDay / 3600, 2, UInt8(ascii: ":"))
            put(secondOfDay / 60 % 60, 2, UInt8(ascii: ":"))
            put(secondOfDay % 60, 2, UInt8(ascii: "."))
            put(millisecond, 3, UInt8(ascii: "Z"))
            return at
        }
    }

    /// Reads an ISO 8601 date-time with a zone (`Z` or `±hh:mm`), with or without fractions of a
    /// second; nil when it is not one. The result is rounded to the millisecond.
    public static func date(_ text: String) -> Date? {
        let withFraction = Date.ISO8601FormatStyle(includingFractionalSeconds: true)
        let withoutFraction = Date.ISO8601FormatStyle()
        guard let parsed = (try? withFraction.parse(text)) ?? (try? withoutFraction.parse(text)) else { return nil }
        return rounded(parsed)
    }

    static func milliseconds(_ date: Date) -> Int64 {
        let value = (date.timeIntervalSince1970 * 1000).rounded()
        guard value.isFinite else { return value > 0 ? latest : earliest }
        return Int64(min(max(value, Double(earliest)), Double(latest)))
    }

}
