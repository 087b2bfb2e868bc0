public import CallRouting
public import Foundation
public import RouseVocabulary

/// The `push_token_liveness` table (migration 710): each pushed device's last sign of life and the
/// ring pushes counted against it since, kept for the stale-device rule (`DeviceStaleness`, issue
/// 20 item 1). A REGISTER carrying a token (`BindingRecords.write`) and a post of it
/// (`PostedPushTokens.store`) are signs of life; a ring push's end is applied by the rule itself.
///
/// Threading: stateless; every function runs on the connection it is given and blocks its thread
/// until PostgreSQL answers (a `PostgresWorkerPool` worker, the location store's writer, a
/// command-line thread).
public enum PushTokenLiveness {
    /// Notes signs of life: `signs` as `family`, `token` and `at` (seconds since 1970; absent for
    /// the database's now). A sign newer than the one stored resets the count of unanswered
    /// pushes; an older one (a binding rewritten for another reason) changes nothing.
    static let signOfLifeSQL = """
        INSERT INTO push_token_liveness AS l (family, token, last_sign_of_life, unanswered_pushes)
        SELECT DISTINCT ON (r.family, r.token) r.family, r.token, coalesce(to_timestamp(r.at), now()), 0
        FROM jsonb_to_recordset($1::jsonb) AS r(family text, token text, at double precision)
        ORDER BY r.family, r.token, r.at DESC NULLS FIRST
        ON CONFLICT (family, token) DO UPDATE SET
            unanswered_pushes = CASE WHEN EXCLUDED.last_sign_of_life > l.last_sign_of_life THEN 0 ELSE l.unanswered_pushes END,
            last_sign_of_life = greatest(l.last_sign_of_life, EXCLUDED.last_sign_of_life)
        """

    /// Records that `tokens` showed life at `date` (nil: now, by the database's clock).
    public static func signOfLife(_ tokens: [PushTokenID], at date: Date? = nil, on connection: PostgresConnection) throws {
        try signOfLife(tokens.map { ($0, date) }, on: connection)
    }

    /// Records each token's sign of life at its own time.
    static func signOfLife(_ signs: [(token: PushTokenID, at: Date?)], on connection: PostgresConnection) throws {
        guard !signs.isEmpty else { return }
        var json = JSONText(capacity: signs.count * 128)
        json.beginArray()
        for sign in signs {
            json.beginObject()
            json.field("family", sign.token.family.rawValue)
            json.field("token", sign.token.token)
            json.field("at", sign.at?.timeIntervalSince1970)
            json.endObject()
        }
        json.endArray()
        try connection.query(signOfLifeSQL, [json.text])
    }

    /// A ring push to `token` made at `pushedAt` has had its wait: applies the rule at `now` and
    /// stores the result, in one transaction (the row is locked, so two instances' reports both
    /// count). A device with no record yet is taken as alive just before the push: its pushes
    /// count, and its `policy.after` starts now. Returns how the verdict changed.
    public static func ringPushEnded(
        _ token: PushTokenID, pushedAt: Date, accepted: Bool, callOutlastedWakeWait: Bool, now: Date, policy: DeviceStaleness.Policy,
        on connection: PostgresConnection
    ) throws -> DeviceStaleness.Change {
        try connection.transaction { connection in
            var device = try read([token], lock: true, on: connection)[token] ?? DeviceStaleness(lastSignOfLife: pushedAt.addingTimeInterval(-1))
            let change = device.handle(
                .ringPushEnded(pushedAt: pushedAt, accepted: accepted, callOutlastedWakeWait: callOutlastedWakeWait), now: now, policy: policy)
            try connection.query(
                """
                INSERT INTO push_token_liveness (family, token, last_sign_of_life, unanswered_pushes) VALUES ($1, $2, to_timestamp($3), $4)
                ON CONFLICT (family, token) DO UPDATE SET last_sign_of_life = EXCLUDED.last_sign_of_life,
                    unanswered_pushes = EXCLUDED.unanswered_pushes
                """,
                [token.family.rawValue, token.token, String(device.lastSignOfLife.timeIntervalSince1970), String(device.unansweredPushes)])
            return change
        }
    }

    /// What is recorded of `tokens` (those with a record).
    public static func liveness(of tokens: [PushTokenID], on connection: PostgresConnection) throws -> [PushTokenID: DeviceStaleness] {
        try read(tokens, lock: false, on: connection)
    }

    private static func read(_ tokens: [PushTokenID], lock: Bool, on connection: PostgresConnection) throws -> [PushTokenID: DeviceStaleness] {
        guard !tokens.isEmpty else { return [:] }
        let rows = try connection.query(
            """
            SELECT family, token, extract(epoch FROM last_sign_of_life)::text, unanswered_pushes::text FROM push_token_liveness
            WHERE family || ':' || token IN (SELECT jsonb_array_elements_text($1::jsonb))
            """ + (lock ? " FOR UPDATE" : ""),
            [JSONText.array(of: tokens.map(\.key))])
        var found: [PushTokenID: DeviceStaleness] = [:]
        for row in rows.rows {
            guard let family = row[0].flatMap(PushProviderFamily.init(rawValue:)), let token = row[1],
                let seconds = row[2].flatMap(Double.init), let count = row[3].flatMap(Int.init)
            else { continue }
            found[PushTokenID(family: family, token: token)] = DeviceStaleness(
                lastSignOfLife: Date(timeIntervalSince1970: seconds), unansweredPushes: count)
        }
        return found
    }
}
