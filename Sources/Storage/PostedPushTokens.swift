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
    /// One statement (`storeStatement`): the upsert, replacing the device's earlier token of the
    /// same kind, clearing a dead mark, stripping the token from other extensions' bindings, the
    /// device's sign of life and both announcements (`rouse_bindings` for each stripped binding,
    /// `rouse_posted_tokens` unless nothing changed) commit together or not at all.
    public static func store(
        _ channel: PushChannel, deviceID: String?, for aor: AddressOfRecord, on connection: PostgresConnection
    ) throws -> PostedTokenChange? {
        let row = storeRow(channel, deviceID: deviceID, for: aor)
        let rows = try connection.query(storeStatement.statement(for: [row.values]))
        return change(from: PostgresSharedStatement.rowsByJob(rows, jobs: 1)[0].first)
    }

    /// Stores `channel` (and a web push subscription's `keys`) for `aor` in a transaction shared
    /// with the other posts queued with it on `group`, and resumes once that committed; waits at
    /// most `seconds` (then `PostgresError.deadlinePassed`). The posts of one batch are stored by
    /// one statement (each its row of `storeStatement`; two posts of the same token, or of one
    /// device's channel kind, by two, in their order). Returns nil when the extension does not exist. A post that fails
    /// fails alone.
    public static func store(
        _ channel: PushChannel, deviceID: String?, webPushKeys keys: WebPushSubscriptionKeys?, for aor: AddressOfRecord,
        on group: PostgresGroupCommit, within seconds: Double
    ) async throws -> PostedTokenChange? {
        let keysStatement = keys.map { PostgresWebPushSubscriptions.storeStatement(endpoint: channel.token, keys: $0, for: aor) }
        let result = try await group.perform(
            sharing: storeRow(channel, deviceID: deviceID, for: aor), then: keysStatement.map { [$0] } ?? [], within: seconds)
        return change(from: result.shared.first)
    }

    /// A post's row of `storeStatement`. Posts of the same token, or of the same device and
    /// channel kind of one extension (the later replaces the earlier's token), never share a
    /// statement.
    static func storeRow(_ channel: PushChannel, deviceID: String?, for aor: AddressOfRecord) -> PostgresSharedRow {
        let family = channel.family.rawValue
        var keys = ["token \(family):\(channel.token)"]
        if let deviceID { keys.append("device \(channel.kind == .voip) \(aor) \(deviceID)") }
        return PostgresSharedRow(
            statement: storeStatement,
            values: [aor.domain, aor.number, family, channel.token, channel.provider.rawValue, channel.param, channel.kind.rawValue, deviceID],
            keys: keys)
    }

    /// What `storeSQL`'s row for a post says was done; nil when the extension does not exist.
    static func change(from row: [String?]?) -> PostedTokenChange? {
        guard let row, let extensionID = row[0] else { return nil }
        guard let previousExtension = row[1] else { return .stored }
        if row[4] == "t" { return .refreshed }
        let movedFrom = previousExtension == extensionID
            ? nil : row[2].flatMap { number in row[3].map { AddressOfRecord(number: number, domain: $0) } }
        return .updated(movedFrom: movedFrom)
    }

    /// `storeSQL` shared by the posts of a batch: a row each, the announcements' channels after.
    static let storeStatement = PostgresSharedStatement(
        name: "rouse_posted_tokens_store", singleName: "rouse_posted_token_store_one",
        columns: ["domain", "number", "family", "token", "provider", "param", "kind", "device_id"], afterInput: storeSQL,
        constants: [PostgresLocationStore.notificationChannel, bindingOrigin, notificationChannel])

    /// The store statement of any number of posts, after `input` (domain, number, family, token,
    /// provider, param, kind, device id, ordinal; no two of the same token, or of one extension's
    /// device and channel kind): each post is answered by one row, its ordinal, the extension's id
    /// (NULL when it does not exist), the token's earlier extension (id, number, domain) and
    /// whether nothing changed but the time.
    /// A device's earlier token that another post of the same statement posts is not replaced by
    /// it (that post takes it, as if it came after).
    static let storeSQL = """
            , ext AS (
                -- Looked up row by row (a subquery each: an index lookup whatever the plan guesses
                -- of the number of rows), as the token's row is.
                SELECT * FROM (
                    SELECT i.*, (
                        SELECT e.id FROM extensions e JOIN sip_domains d ON d.id = e.domain_id WHERE d.domain = i.domain AND e.number = i.number
                    ) AS id
                    FROM input i
                ) AS looked_up WHERE id IS NOT NULL
            ), prev AS (
                SELECT held.* FROM input i CROSS JOIN LATERAL (
                    SELECT p.family, p.token, p.extension_id, p.provider, p.param, p.kind, p.device_id, e.number, d.domain
                    FROM posted_push_tokens p JOIN extensions e ON e.id = p.extension_id JOIN sip_domains d ON d.id = e.domain_id
                    WHERE p.family = i.family AND p.token = i.token
                    FOR UPDATE OF p
                ) AS held
            ), upserted AS (
                INSERT INTO posted_push_tokens (family, token, extension_id, provider, param, kind, device_id, posted_at)
                SELECT family, token, id, provider, param, kind, device_id, now() FROM ext
                ON CONFLICT (family, token) DO UPDATE SET extension_id = EXCLUDED.extension_id,
                    provider = EXCLUDED.provider, param = EXCLUDED.param, kind = EXCLUDED.kind,
                    device_id = EXCLUDED.device_id, posted_at = now()
                RETURNING 1
            ), replaced AS (
                -- The same device's earlier token of the same channel kind (VoIP, or regular):
                -- rotated, so it goes. The device's token of the other kind stays, paired by it.
                DELETE FROM posted_push_tokens q USING ext
                WHERE q.extension_id = ANY (ARRAY(SELECT id FROM ext WHERE device_id IS NOT NULL))
                    AND ext.device_id IS NOT NULL AND q.extension_id = ext.id AND q.device_id = ext.device_id
                    AND (q.kind = 'voip') = (ext.kind = 'voip')
                    AND NOT EXISTS (SELECT 1 FROM input i WHERE i.family = q.family AND i.token = q.token)
                RETURNING ext.n
            ), revived AS (
                DELETE FROM push_dead_tokens t USING ext
                WHERE t.family = ext.family AND t.token = ext.token
                RETURNING 1
            ), alive AS (
                -- A post is its device's sign of life (the stale-device rule).
                INSERT INTO push_token_liveness AS l (family, token, last_sign_of_life, unanswered_pushes)
                SELECT family, token, now(), 0 FROM ext
                \(PushTokenLiveness.signOfLifeConflictSQL)
                RETURNING 1
            ), stripped AS (
                DELETE FROM binding_push_channels c USING bindings b, ext
                WHERE b.id = c.binding_id AND c.family = ext.family AND c.token = ext.token AND b.extension_id <> ext.id
                RETURNING b.id, b.aor
            ), announced AS (
                SELECT pg_notify($9, 'refreshed ' || aor || ' ' || lower(id::text) || ' ' || $10) FROM stripped
            ), unchanged AS (
                SELECT ext.n, EXISTS (
                    SELECT 1 FROM prev WHERE prev.family = ext.family AND prev.token = ext.token AND prev.extension_id = ext.id
                        AND prev.provider = ext.provider AND prev.param IS NOT DISTINCT FROM ext.param AND prev.kind = ext.kind
                        AND prev.device_id IS NOT DISTINCT FROM ext.device_id
                ) AND NOT EXISTS (SELECT 1 FROM replaced r WHERE r.n = ext.n) AS value
                FROM ext
            ), told AS (
                SELECT pg_notify($11, 'stored ' || ext.number || '@' || ext.domain) FROM ext JOIN unchanged u ON u.n = ext.n
                WHERE NOT u.value
            )
            SELECT i.n, ext.id::text, prev.extension_id::text, prev.number, prev.domain, u.value,
                (SELECT count(*) FROM upserted) + (SELECT count(*) FROM revived) + (SELECT count(*) FROM alive)
                    + (SELECT count(*) FROM announced) + (SELECT count(*) FROM replaced) + (SELECT count(*) FROM told)
            FROM input i LEFT JOIN ext ON ext.n = i.n LEFT JOIN unchanged u ON u.n = i.n
                LEFT JOIN prev ON prev.family = i.family AND prev.token = i.token
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
