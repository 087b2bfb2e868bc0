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
    /// What a sign of life does to a device's row (`EXCLUDED` the new sign): a sign newer than the
    /// one stored resets the count of unanswered pushes and lifts a stale mark; an older one (a
    /// binding rewritten for another reason) changes nothing. Shared by the posting statement.
    static let signOfLifeConflictSQL = """
        ON CONFLICT (family, token) DO UPDATE SET
            unanswered_pushes = CASE WHEN EXCLUDED.last_sign_of_life > l.last_sign_of_life THEN 0 ELSE l.unanswered_pushes END,
            stale_from = CASE WHEN EXCLUDED.last_sign_of_life > l.last_sign_of_life THEN NULL ELSE l.stale_from END,
            last_sign_of_life = greatest(l.last_sign_of_life, EXCLUDED.last_sign_of_life)
        """

    /// Notes signs of life: `signs` as `family`, `token`, `at` (seconds since 1970; absent for
    /// the database's now) and `binding_id` (when present, the sign counts only if that binding
    /// was written: a REGISTER's, in the same transaction).
    static let signOfLifeSQL = """
        INSERT INTO push_token_liveness AS l (family, token, last_sign_of_life, unanswered_pushes)
        SELECT DISTINCT ON (r.family, r.token) r.family, r.token, coalesce(to_timestamp(r.at), now()), 0
        FROM jsonb_to_recordset($1::jsonb) AS r(family text, token text, at double precision, binding_id uuid)
        WHERE r.binding_id IS NULL OR EXISTS (SELECT 1 FROM bindings b WHERE b.id = r.binding_id)
        ORDER BY r.family, r.token, r.at DESC NULLS FIRST
        \(signOfLifeConflictSQL)
        """

    /// Records that `tokens` showed life at `date` (nil: now, by the database's clock).
    public static func signOfLife(_ tokens: [PushTokenID], at date: Date? = nil, on connection: PostgresConnection) throws {
        guard !tokens.isEmpty else { return }
        try connection.query(signOfLifeStatement(tokens.map { (token: $0, at: date, binding: UUID?.none) }))
    }

    /// The statement recording each token's sign of life at its own time (when `binding` is
    /// given, only if that binding exists when it runs).
    static func signOfLifeStatement(_ signs: [(token: PushTokenID, at: Date?, binding: UUID?)]) -> PostgresStatement {
        var json = JSONText(capacity: signs.count * 160)
        json.beginArray()
        for sign in signs {
            json.beginObject()
            json.field("family", sign.token.family.rawValue)
            json.field("token", sign.token.token)
            json.field("at", sign.at?.timeIntervalSince1970)
            if let binding = sign.binding { json.field("binding_id", uuid: binding) }
            json.endObject()
        }
        json.endArray()
        var parameters = PostgresParameters(capacity: signs.count * 160 + 8)
        parameters.append(json)
        return PostgresStatement(prepared: "rouse_push_sign_of_life", signOfLifeSQL, parameters)
    }

    /// A ring push to `token` made at `pushedAt` has had its wait: applies the rule at `now` and
    /// stores the result, in one transaction (the row is locked, so two instances' reports both
    /// count). A device with no record yet is taken as alive just before the push: its pushes
    /// count, and its `policy.after` starts now. Returns how the verdict changed.
    public static func ringPushEnded(
        _ token: PushTokenID, pushedAt: Date, accepted: Bool, callOutlastedWakeWait: Bool, now: Date, policy: DeviceStaleness.Policy,
        on connection: PostgresConnection
    ) throws -> DeviceStaleness.Change {
        try recordRingPushEnd(
            token, pushedAt: pushedAt, accepted: accepted, callOutlastedWakeWait: callOutlastedWakeWait, now: now, policy: policy, on: connection
        ).change
    }

    /// What `ringPushEnded` does, also returning the device's record after it and whether its
    /// stale mark (`stale_from`, which the replica carries to every instance) was set by it.
    public static func recordRingPushEnd(
        _ token: PushTokenID, pushedAt: Date, accepted: Bool, callOutlastedWakeWait: Bool, now: Date, policy: DeviceStaleness.Policy,
        on connection: PostgresConnection
    ) throws -> (change: DeviceStaleness.Change, device: DeviceStaleness, markedStale: Bool) {
        try connection.transaction { connection in
            let before = try read([token], lock: true, on: connection)[token]
            var device = before ?? DeviceStaleness(lastSignOfLife: pushedAt.addingTimeInterval(-1))
            let change = device.handle(
                .ringPushEnded(pushedAt: pushedAt, accepted: accepted, callOutlastedWakeWait: callOutlastedWakeWait), now: now, policy: policy)
            let staleFrom = device.staleFrom(under: policy)
            try connection.query(
                """
                INSERT INTO push_token_liveness (family, token, last_sign_of_life, unanswered_pushes, stale_from)
                VALUES ($1, $2, to_timestamp($3), $4, to_timestamp($5::double precision))
                ON CONFLICT (family, token) DO UPDATE SET last_sign_of_life = EXCLUDED.last_sign_of_life,
                    unanswered_pushes = EXCLUDED.unanswered_pushes, stale_from = EXCLUDED.stale_from
                """,
                [token.family.rawValue, token.token, String(device.lastSignOfLife.timeIntervalSince1970), String(device.unansweredPushes),
                 staleFrom.map { String($0.timeIntervalSince1970) }])
            return (change, device, staleFrom != nil && (before?.staleFrom(under: policy) == nil))
        }
    }

    /// What is recorded of `tokens` (those with a record).
    public static func liveness(of tokens: [PushTokenID], on connection: PostgresConnection) throws -> [PushTokenID: DeviceStaleness] {
        try read(tokens, lock: false, on: connection)
    }

    /// A device's stale mark as the pages show it: stale from `staleFrom` (a time that may still be
    /// ahead, while its silence grows), silent since `lastSignOfLife`.
    public struct StaleMark: Sendable, Hashable {
        public var staleFrom: Date
        public var lastSignOfLife: Date
        public var unansweredPushes: Int
    }

    /// The stale marks of `tokens` (nil: of every token), by token.
    public static func staleMarks(among tokens: [PushTokenID]?, on connection: PostgresConnection) throws -> [PushTokenID: StaleMark] {
        if let tokens, tokens.isEmpty { return [:] }
        let rows = try connection.query(
            """
            SELECT family, token, extract(epoch FROM stale_from)::text, extract(epoch FROM last_sign_of_life)::text, unanswered_pushes::text
            FROM push_token_liveness WHERE stale_from IS NOT NULL
            AND ($1::jsonb IS NULL OR family || ':' || token IN (SELECT jsonb_array_elements_text($1::jsonb)))
            """,
            [tokens.map { JSONText.array(of: $0.map(\.key)) }])
        var marks: [PushTokenID: StaleMark] = [:]
        for row in rows.rows {
            guard let family = row[0].flatMap(PushProviderFamily.init(rawValue:)), let token = row[1],
                let from = row[2].flatMap(Double.init), let last = row[3].flatMap(Double.init), let count = row[4].flatMap(Int.init)
            else { continue }
            marks[PushTokenID(family: family, token: token)] = StaleMark(
                staleFrom: Date(timeIntervalSince1970: from), lastSignOfLife: Date(timeIntervalSince1970: last), unansweredPushes: count)
        }
        return marks
    }

    /// How many devices are stale now (by the database's clock).
    public static func staleCount(on connection: PostgresConnection) throws -> Int {
        Int(try connection.query("SELECT count(*)::text FROM push_token_liveness WHERE stale_from <= now()").rows.first?[0] ?? "0") ?? 0
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


/// The stale-device record as calls use it (CallRouting's `DeviceLiveness`): the stale marks come
/// from this instance's replica (`WakeTokenReplica`), so a call reads no PostgreSQL; ring-push ends
/// and call-token uses are written through a worker pool, and `onChange` hears what each write
/// changed (for the log).
///
/// Threading: thread-safe; every method returns at once, the writes run on the pool's workers and
/// `onChange` is called there.
public final class PostgresDeviceLiveness: DeviceLiveness, Sendable {
    /// What a write changed: a device marked stale (from a time, perhaps still ahead).
    public enum Change: Sendable {
        case markedStale(PushTokenID, DeviceStaleness, from: Date)
        /// A ring push's end could not be written (PostgreSQL away): it does not count.
        case writeFailed(PushTokenID, String)
    }

    private let pool: PostgresWorkerPool
    private let replica: WakeTokenReplica
    private let policy: DeviceStaleness.Policy
    private let clock: @Sendable () -> Date
    private let onChange: @Sendable (Change) -> Void

    public init(
        pool: PostgresWorkerPool, replica: WakeTokenReplica, policy: DeviceStaleness.Policy, clock: @escaping @Sendable () -> Date = { Date() },
        onChange: @escaping @Sendable (Change) -> Void = { _ in }
    ) {
        self.pool = pool
        self.replica = replica
        self.policy = policy
        self.clock = clock
        self.onChange = onChange
    }

    public func staleTokens(among tokens: [PushTokenID], now: Date) -> Set<PushTokenID> {
        replica.staleTokens(among: tokens, now: now)
    }

    public func ringPushEnded(_ token: PushTokenID, pushedAt: Date, accepted: Bool, callOutlastedWakeWait: Bool) {
        let policy = policy
        let clock = clock
        let onChange = onChange
        pool.submit({ connection in
            try PushTokenLiveness.recordRingPushEnd(
                token, pushedAt: pushedAt, accepted: accepted, callOutlastedWakeWait: callOutlastedWakeWait, now: clock(), policy: policy,
                on: connection)
        }) { result in
            switch result {
            case .failure(let error):
                onChange(.writeFailed(token, "\(error)"))
            case .success(let written):
                guard written.markedStale, let from = written.device.staleFrom(under: policy) else { return }
                onChange(.markedStale(token, written.device, from: from))
            }
        }
    }

    public func signOfLife(_ token: PushTokenID) {
        pool.submit({ connection in try PushTokenLiveness.signOfLife([token], on: connection) }) { _ in }
    }
}
