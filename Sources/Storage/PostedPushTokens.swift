public import Foundation
public import Push
public import Registrar
public import RouseVocabulary

/// A push token an app posted for its extension over HTTP (product.md, "By posting its token"):
/// a way to wake that extension's device without a registration carrying it. A value.
public struct PostedPushToken: Hashable, Sendable {
    public let aor: AddressOfRecord
    public let channel: PushChannel
    public let deviceID: String?
    public let postedAt: Date

    public init(aor: AddressOfRecord, channel: PushChannel, deviceID: String?, postedAt: Date) {
        self.aor = aor
        self.channel = channel
        self.deviceID = deviceID
        self.postedAt = postedAt
    }
}

/// What storing a posted token did.
public enum PostedTokenChange: Equatable, Sendable {
    /// The token was new.
    case stored
    /// The extension already held it with the same details: only `posted_at` moved.
    case refreshed
    /// The token (or its details) changed: `movedFrom` is the extension that held it before, if
    /// another one.
    case updated(movedFrom: AddressOfRecord?)
}

/// The `posted_push_tokens` table (migration 11). A token (family + token, decisions.md) lives on
/// one extension: posting it for another moves it there, and every binding of another extension
/// loses that push channel in the same transaction (announced on `rouse_bindings` so every
/// registrar reloads it); registering it for another extension removes the posted copy
/// (`BindingRecords.takePostedSQL`). A post with a `deviceId` replaces the extension's earlier
/// post of that device and channel kind (VoIP, or regular), so a rotated token leaves nothing
/// behind. Changes are announced on `rouse_posted_tokens` with the payload
/// `<stored|removed> <number@domain>`; every instance learns them from the replica's change log.
///
/// Threading: stateless; every function runs on the connection it is given and blocks its thread
/// until PostgreSQL answers, so call it on a `PostgresWorkerPool` worker or a command-line thread.
public enum PostedPushTokens {
    /// The channel changes are announced on.
    public static let notificationChannel = "rouse_posted_tokens"
    /// The origin written into the binding notifications this table's changes send.
    static let bindingOrigin = "posted-tokens"

    /// Stores `channel` for `aor`. Returns nil when the extension does not exist.
    ///
    /// One statement (prepared once per connection): the upsert, replacing the device's earlier
    /// token of the same kind, clearing a dead mark, stripping the token from other extensions'
    /// bindings, the device's sign of life and both announcements (`rouse_bindings` for each
    /// stripped binding, `rouse_posted_tokens` unless nothing changed) commit together or not at
    /// all.
    public static func store(
        _ channel: PushChannel, deviceID: String?, for aor: AddressOfRecord, on connection: PostgresConnection
    ) throws -> PostedTokenChange? {
        change(from: try connection.query(storeStatement(channel, deviceID: deviceID, for: aor)))
    }

    /// Stores `channel` (and a web push subscription's `keys`) for `aor` in a transaction shared
    /// with the other posts queued with it on `group`, and resumes once that committed; waits at
    /// most `seconds` (then `PostgresError.deadlinePassed`). Returns nil when the extension does
    /// not exist. A post that fails fails alone.
    public static func store(
        _ channel: PushChannel, deviceID: String?, webPushKeys keys: WebPushSubscriptionKeys?, for aor: AddressOfRecord,
        on group: PostgresGroupCommit, within seconds: Double
    ) async throws -> PostedTokenChange? {
        var statements = [storeStatement(channel, deviceID: deviceID, for: aor)]
        if let keys { statements.append(PostgresWebPushSubscriptions.storeStatement(endpoint: channel.token, keys: keys, for: aor)) }
        let rows = try await group.perform(statements, within: seconds)
        return rows.first.flatMap(change(from:))
    }

    /// `storeSQL` with its parameters.
    static func storeStatement(_ channel: PushChannel, deviceID: String?, for aor: AddressOfRecord) -> PostgresStatement {
        PostgresStatement(
            prepared: "rouse_posted_token_store", storeSQL,
            PostgresParameters([
                aor.domain, aor.number, channel.family.rawValue, channel.token, channel.provider.rawValue, channel.param,
                channel.kind.rawValue, deviceID, PostgresLocationStore.notificationChannel, bindingOrigin, notificationChannel,
            ]))
    }

    /// What `storeSQL`'s row says was done; nil when the extension does not exist.
    static func change(from rows: PostgresRows) -> PostedTokenChange? {
        guard let row = rows.rows.first, let extensionID = row[0] else { return nil }
        guard let previousExtension = row[1] else { return .stored }
        if row[4] == "t" { return .refreshed }
        let movedFrom = previousExtension == extensionID
            ? nil : row[2].flatMap { number in row[3].map { AddressOfRecord(number: number, domain: $0) } }
        return .updated(movedFrom: movedFrom)
    }

    /// `store`'s one statement (prepared once per connection: it is planned once, not per post).
    static let storeSQL = """
            WITH ext AS (
                SELECT e.id FROM extensions e JOIN sip_domains d ON d.id = e.domain_id WHERE d.domain = $1 AND e.number = $2
            ), prev AS (
                SELECT p.extension_id, p.provider, p.param, p.kind, p.device_id, e.number, d.domain
                FROM posted_push_tokens p JOIN extensions e ON e.id = p.extension_id JOIN sip_domains d ON d.id = e.domain_id
                WHERE p.family = $3 AND p.token = $4 FOR UPDATE OF p
            ), upserted AS (
                INSERT INTO posted_push_tokens (family, token, extension_id, provider, param, kind, device_id, posted_at)
                SELECT $3, $4, ext.id, $5, $6, $7, $8, now() FROM ext
                ON CONFLICT (family, token) DO UPDATE SET extension_id = EXCLUDED.extension_id,
                    provider = EXCLUDED.provider, param = EXCLUDED.param, kind = EXCLUDED.kind,
                    device_id = EXCLUDED.device_id, posted_at = now()
                RETURNING 1
            ), replaced AS (
                -- The same device's earlier token of the same channel kind (VoIP, or regular):
                -- rotated, so it goes. The device's token of the other kind stays, paired by it.
                DELETE FROM posted_push_tokens q USING ext
                WHERE $8::text IS NOT NULL AND q.extension_id = ext.id AND q.device_id = $8
                    AND (q.kind = 'voip') = ($7 = 'voip') AND NOT (q.family = $3 AND q.token = $4)
                RETURNING 1
            ), revived AS (
                DELETE FROM push_dead_tokens WHERE family = $3 AND token = $4 AND EXISTS (SELECT 1 FROM ext) RETURNING 1
            ), alive AS (
                -- A post is its device's sign of life (the stale-device rule).
                INSERT INTO push_token_liveness AS l (family, token, last_sign_of_life, unanswered_pushes)
                SELECT $3, $4, now(), 0 FROM ext
                \(PushTokenLiveness.signOfLifeConflictSQL)
                RETURNING 1
            ), stripped AS (
                DELETE FROM binding_push_channels c USING bindings b, ext
                WHERE b.id = c.binding_id AND c.family = $3 AND c.token = $4 AND b.extension_id <> ext.id
                RETURNING b.id, b.aor
            ), announced AS (
                SELECT pg_notify($9, 'refreshed ' || aor || ' ' || lower(id::text) || ' ' || $10) FROM stripped
            ), unchanged AS (
                SELECT EXISTS (
                    SELECT 1 FROM prev, ext WHERE prev.extension_id = ext.id AND prev.provider = $5
                        AND prev.param IS NOT DISTINCT FROM $6 AND prev.kind = $7 AND prev.device_id IS NOT DISTINCT FROM $8
                ) AND NOT EXISTS (SELECT 1 FROM replaced) AS value
            ), told AS (
                SELECT pg_notify($11, 'stored ' || $2 || '@' || $1) FROM ext, unchanged WHERE NOT unchanged.value
            )
            SELECT ext.id::text, prev.extension_id::text, prev.number, prev.domain, unchanged.value,
                (SELECT count(*) FROM upserted) + (SELECT count(*) FROM revived) + (SELECT count(*) FROM alive)
                    + (SELECT count(*) FROM announced)
                    + (SELECT count(*) FROM replaced)
                    + (SELECT count(*) FROM told)
            FROM ext CROSS JOIN unchanged LEFT JOIN prev ON true
            """

    /// Removes `token` from `aor` (either family when `family` is nil; APNs tokens compared in
    /// lower case). Returns whether the extension held it.
    public static func remove(
        token: String, family: PushProviderFamily?, from aor: AddressOfRecord, on connection: PostgresConnection
    ) throws -> Bool {
        try connection.transaction { connection in
            let removed = try connection.query(
                """
                DELETE FROM posted_push_tokens p USING extensions e, sip_domains d
                WHERE e.id = p.extension_id AND d.id = e.domain_id AND d.domain = $1 AND e.number = $2
                    AND ($4::text IS NULL OR p.family = $4)
                    AND ((p.family <> 'apns' AND p.token = $3) OR (p.family = 'apns' AND p.token = lower($3)))
                """,
                [aor.domain, aor.number, token, family?.rawValue])
            guard removed.affectedRows > 0 else { return false }
            try connection.query("SELECT pg_notify($1, $2)", [notificationChannel, "removed \(aor)"])
            return true
        }
    }

    /// The posted tokens of one extension (or all), by extension then posting time.
    public static func list(for aor: AddressOfRecord?, on connection: PostgresConnection) throws -> [PostedPushToken] {
        try list(for: aor, keys: nil, on: connection)
    }

    /// The posted tokens whose `family:token` is among `keys` (for the replica).
    static func list(keys: [String], on connection: PostgresConnection) throws -> [PostedPushToken] {
        keys.isEmpty ? [] : try list(for: nil, keys: keys, on: connection)
    }

    private static func list(for aor: AddressOfRecord?, keys: [String]?, on connection: PostgresConnection) throws -> [PostedPushToken] {
        let rows = try connection.query(
            """
            SELECT e.number, d.domain, p.provider, p.token, p.param, p.kind, p.device_id, extract(epoch FROM p.posted_at)
            FROM posted_push_tokens p JOIN extensions e ON e.id = p.extension_id JOIN sip_domains d ON d.id = e.domain_id
            WHERE ($1::text IS NULL OR (d.domain = $1 AND e.number = $2))
                AND ($3::jsonb IS NULL OR p.family || ':' || p.token IN (SELECT jsonb_array_elements_text($3::jsonb)))
            ORDER BY d.domain, e.number, p.posted_at
            """,
            [aor?.domain, aor?.number, keys.map(JSONText.array(of:))])
        return rows.rows.compactMap { row in
            guard let number = row[0], let domain = row[1], let provider = row[2].flatMap(PushProvider.init(rawValue:)),
                let token = row[3], let kind = row[5].flatMap(PushChannelKind.init(rawValue:))
            else { return nil }
            return PostedPushToken(
                aor: AddressOfRecord(number: number, domain: domain),
                channel: PushChannel(provider: provider, token: token, param: row[4], kind: kind), deviceID: row[6],
                postedAt: Date(timeIntervalSince1970: row[7].flatMap { Double($0) } ?? 0))
        }
    }

    /// How many push apps are configured (for health).
    public static func pushAppCount(on connection: PostgresConnection) throws -> Int {
        Int(try connection.query("SELECT count(*) FROM push_apps").rows.first?[0] ?? "0") ?? 0
    }
}
