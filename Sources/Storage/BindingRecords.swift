import Foundation
import Registrar
import RouseVocabulary

/// The SQL of the location store: bindings and their push channels as rows. Each batch travels as
/// one `jsonb` bind parameter unpacked with `jsonb_to_recordset`, so a transaction of any size costs
/// a handful of statements.
///
/// Threading: stateless; each function runs on the connection it is given, on that connection's
/// thread.
enum BindingRecords {
    /// The net effect of several batches: the last change per binding id, in first-seen order.
    struct WritePlan {
        enum Operation {
            case save(Binding)
            /// Only the CSeq and the times move (`BindingChange.refresh`).
            case refresh(Binding)
            case delete(Binding, BindingEvent.Kind)
        }

        /// The operations in first-seen order of their binding ids; a later change to an id
        /// replaces its entry (with the member that made it).
        private(set) var entries: [(id: UUID, operation: Operation, member: Int)] = []
        /// The CSeq and times of each entry's binding, in the same order: plain values, so a
        /// refresh's parameters are written from them without copying a binding out of `entries`.
        private(set) var written: [(cseq: UInt32, registeredAt: Date, expiresAt: Date)] = []
        /// Where each id's entry is, kept once the plan holds more than `scanned` entries (a
        /// short plan is searched instead, with no hashing and no table).
        private var positions: [UUID: Int] = [:]
        private static let scanned = 16
        private(set) var members: [Int] = []
        private(set) var changeCount = 0

        var isEmpty: Bool { entries.isEmpty }

        mutating func add(_ changes: [BindingChange], member: Int) {
            members.append(member)
            changeCount += changes.count
            for change in changes {
                switch change {
                case .save(let binding):
                    put(binding.id, .save(binding), member: member, of: binding)
                case .refresh(let binding):
                    // A refresh of a save not written yet is that save, with the new times.
                    if let at = position(of: binding.id), case .save = entries[at].operation {
                        put(binding.id, .save(binding), member: member, of: binding)
                    } else {
                        put(binding.id, .refresh(binding), member: member, of: binding)
                    }
                case .delete(let binding, let kind):
                    put(binding.id, .delete(binding, kind), member: member, of: binding)
                }
            }
        }

        private func position(of id: UUID) -> Int? {
            entries.count <= Self.scanned ? entries.firstIndex { $0.id == id } : positions[id]
        }

        private mutating func put(_ id: UUID, _ operation: Operation, member: Int, of binding: Binding) {
            let times = (binding.cseq, binding.registeredAt, binding.expiresAt)
            if let at = position(of: id) {
                entries[at] = (id, operation, member)
                written[at] = times
                return
            }
            entries.append((id, operation, member))
            written.append(times)
            if entries.count == Self.scanned + 1 {
                for (at, entry) in entries.enumerated() { positions[entry.id] = at }
            } else if entries.count > Self.scanned + 1 {
                positions[id] = entries.count - 1
            }
        }
    }

    /// What a committed write did not do: saves whose extension no longer exists.
    struct WriteOutcome {
        var failedMembers: [(Int, any Error)] = []
    }

    /// The first NUL character in the changes' texts (PostgreSQL text cannot hold one), as an error.
    /// The texts a quoted-pair may give a NUL (instance, Path, User-Agent) are stored escaped instead.
    static func unstorable(_ changes: [BindingChange]) -> LocationStoreError? {
        func holdsNUL(_ text: String?) -> Bool {
            guard let text else { return false }
            return text.utf8.withContiguousStorageIfAvailable { utf8 in
                utf8.baseAddress.map { memchr($0, 0, utf8.count) != nil } ?? false
            } ?? text.utf8.contains(0)
        }
        // Each change read in place (through the buffer's address), not copied out of the array.
        return changes.withUnsafeBufferPointer { buffer in
            for index in buffer.indices {
                switch buffer[index] {
                case .save(let binding), .refresh(let binding):
                    if let problem = unstorable(binding, holdsNUL) { return problem }
                case .delete: continue
                }
            }
            return nil
        }
    }

    /// The first of a binding's texts that holds a NUL (by `holdsNUL`), as an error.
    private static func unstorable(_ binding: Binding, _ holdsNUL: (String?) -> Bool) -> LocationStoreError? {
        let field: String
        if holdsNUL(binding.contact) {
            field = "contact"
        } else if holdsNUL(binding.callID) {
            field = "call-id"
        } else if holdsNUL(binding.flow.connectionID.name) || holdsNUL(binding.flow.instanceID) {
            field = "flow"
        } else if binding.pushChannels.contains(where: { holdsNUL($0.token) }) {
            field = "push token"
        } else if binding.pushChannels.contains(where: { holdsNUL($0.param) }) {
            field = "push param"
        } else {
            return nil
        }
        return .unstorableText(field: field, aor: binding.aor)
    }

    // MARK: - Writing

    /// Commits the plan in one transaction sent as one pipeline (one round trip): the deletes,
    /// the refreshes, the saves (upserts) with their push channels, and one Sync. Without BEGIN and
    /// COMMIT the statements up to the Sync are one implicit transaction, committed there (a
    /// failure of that commit, such as a deferred trigger's, is the pipeline's failure). Each
    /// statement announces its bindings on `rouse_bindings` itself (`<kind> <aor> <id>[ <origin>]`),
    /// so no payload is built here; the statements after the upsert touch only bindings it wrote
    /// (a save whose extension is gone writes none), so none of them waits for its answer. The hot
    /// statements are prepared once per connection. When a statement fails PostgreSQL rolls the
    /// transaction back at the Sync, and its error is thrown.
    static func commit(_ plan: WritePlan, origin: String = "", on connection: PostgresConnection) throws -> WriteOutcome {
        var saves: [(binding: Binding, member: Int)] = []
        // Refreshes by their place in the plan: their fields are written from it, not copied out.
        var refreshes: [Int] = []
        var deletes: [(id: UUID, kind: BindingEvent.Kind)] = []
        for index in plan.entries.indices {
            switch plan.entries[index].operation {
            case .save(let binding): saves.append((binding, plan.entries[index].member))
            case .refresh: refreshes.append(index)
            case .delete(_, let kind): deletes.append((plan.entries[index].id, kind))
            }
        }
        let originSuffix = origin.isEmpty ? "" : " " + origin
        var statements: [PostgresStatement] = []
        statements.reserveCapacity(saves.isEmpty ? 2 : 8)

        if !deletes.isEmpty {
            var json = JSONText(capacity: deletes.count * 64)
            json.beginArray()
            for (id, kind) in deletes {
                json.beginObject()
                json.field("id", uuid: id)
                json.field("kind", kind.rawValue)
                json.endObject()
            }
            json.endArray()
            var parameters = PostgresParameters(capacity: deletes.count * 64 + 64)
            parameters.append(json)
            parameters.append(PostgresLocationStore.notificationChannel)
            parameters.append(originSuffix)
            statements.append(PostgresStatement(prepared: "rouse_bindings_delete", deleteSQL, parameters))
        }

        var refresh: Int?
        if !refreshes.isEmpty {
            refresh = statements.count
            statements.append(
                PostgresStatement(prepared: "rouse_bindings_refresh", refreshSQL, refreshParameters(plan, refreshes, originSuffix: originSuffix)))
        }

        var upsert: Int?
        if !saves.isEmpty {
            var parameters = PostgresParameters(capacity: saves.count * 512 + 64)
            parameters.append(encodeBindings(saves.map(\.binding)))
            parameters.append(PostgresLocationStore.notificationChannel)
            parameters.append(originSuffix)
            upsert = statements.count
            statements.append(PostgresStatement(prepared: "rouse_bindings_upsert", upsertSQL, parameters))
            // A refreshed binding's channels are replaced (a new one has none to replace).
            statements.append(
                PostgresStatement(
                    prepared: "rouse_binding_channels_replace", "DELETE FROM binding_push_channels WHERE binding_id = ANY($1::uuid[])",
                    PostgresParameters([uuidArray(saves.map(\.binding.id))])))
            let withChannels = saves.map(\.binding).filter { !$0.pushChannels.isEmpty }
            let channels = encodeChannels(of: withChannels)
            if channels.count > 0 {
                var parameters = PostgresParameters()
                parameters.append(channels.json)
                statements.append(PostgresStatement(prepared: "rouse_binding_channels_insert", insertChannelsSQL, parameters))
                statements.append(PostgresStatement(prepared: "rouse_binding_channels_revive", clearDeadMarksSQL, parameters))
                parameters.append(PostedPushTokens.notificationChannel)
                statements.append(PostgresStatement(prepared: "rouse_binding_channels_take_posted", takePostedSQL, parameters))
                // A REGISTER carrying a token is its device's sign of life (the stale-device rule).
                statements.append(
                    PushTokenLiveness.signOfLifeStatement(
                        withChannels.flatMap { binding in
                            binding.pushChannels.map { (token: $0.tokenID, at: Optional(binding.registeredAt), binding: Optional(binding.id)) }
                        }))
            }
        }

        let results = try connection.pipeline(statements)
        if let failure = results.failure { throw failure.error }
        var outcome = WriteOutcome()
        // Each id is in a plan once: a row for each binding means every one was written.
        if let upsert, results.rows[upsert].count < saves.count {
            let inserted = writtenIDs(results.rows[upsert])
            for (binding, member) in saves where !inserted.contains(binding.id) {
                outcome.failedMembers.append((member, LocationStoreError.noSuchExtension(binding.aor)))
            }
        }
        if let refresh, results.rows[refresh].count < refreshes.count {
            let updated = writtenIDs(results.rows[refresh])
            let gone = refreshes.filter { !updated.contains(plan.entries[$0].id) }
            if !gone.isEmpty {
                // Its row went meanwhile (an expiry sweep, another instance, the extension): saved
                // whole in a transaction of its own, before any member is answered.
                var again = WritePlan()
                for index in gone {
                    guard case .refresh(let binding) = plan.entries[index].operation else { continue }
                    again.add([.save(binding)], member: plan.entries[index].member)
                }
                do {
                    outcome.failedMembers += try commit(again, origin: origin, on: connection).failedMembers
                } catch {
                    for index in gone { outcome.failedMembers.append((plan.entries[index].member, error)) }
                }
            }
        }
        return outcome
    }

    /// The ids in the first column of a statement's rows (the bindings it wrote).
    private static func writtenIDs(_ rows: PostgresRows) -> Set<UUID> {
        var ids: Set<UUID> = []
        ids.reserveCapacity(rows.count)
        for row in rows.rows {
            if let id = row[0].flatMap(UUIDText.parse) { ids.insert(id) }
        }
        return ids
    }

    /// `refreshSQL`'s parameters for the plan's entries at `indices` (refreshes): the ids, CSeqs,
    /// registration and expiry times as four array literals (one element per binding, in the same
    /// order), the channel and the origin suffix. Read from the plan in place, no binding copied.
    static func refreshParameters(_ plan: WritePlan, _ indices: [Int], originSuffix: String) -> PostgresParameters {
        var parameters = PostgresParameters(capacity: indices.count * 80 + 64)
        parameters.appendArray(indices) { $0.write(uuid: plan.entries[$1].id) }
        parameters.appendArray(indices) { $0.write(decimal: Int(plan.written[$1].cseq)) }
        parameters.appendArray(indices) { $0.write(epochSeconds: plan.written[$1].registeredAt) }
        parameters.appendArray(indices) { $0.write(epochSeconds: plan.written[$1].expiresAt) }
        parameters.append(PostgresLocationStore.notificationChannel)
        parameters.append(originSuffix)
        return parameters
    }

    /// Moves the CSeq, registration and expiry times of the bindings `$1` (with `$2`…`$4`, arrays
    /// in the same order), announcing each row updated on `$5` as `refreshed <aor> <id>$6`;
    /// returns the `id` of each (a binding whose row is gone updates none).
    static let refreshSQL = """
        WITH written AS (
            UPDATE bindings b SET cseq = r.cseq, registered_at = to_timestamp(r.registered_at),
                expires_at = to_timestamp(r.expires_at), updated_at = now()
            FROM unnest($1::uuid[], $2::bigint[], $3::double precision[], $4::double precision[])
                AS r(id, cseq, registered_at, expires_at)
            WHERE b.id = r.id
            RETURNING b.id, b.aor
        )
        SELECT w.id::text, pg_notify($5, 'refreshed ' || w.aor || ' ' || w.id::text || $6) FROM written w
        """

    static func announce(_ payloads: [String], on connection: PostgresConnection) throws {
        guard !payloads.isEmpty else { return }
        try connection.query(
            "SELECT pg_notify($1, n) FROM jsonb_array_elements_text($2::jsonb) AS n",
            [PostgresLocationStore.notificationChannel, JSONText.array(of: payloads)])
    }

    /// Deletes the bindings of `$1` (`[{id, kind}]`), announcing each one that was there on `$2`
    /// as `<kind> <aor> <id>$3`.
    static let deleteSQL = """
        WITH gone AS (
            DELETE FROM bindings b USING jsonb_to_recordset($1::jsonb) AS r(id uuid, kind text)
            WHERE b.id = r.id
            RETURNING b.id, b.aor, r.kind
        )
        SELECT pg_notify($2, g.kind || ' ' || g.aor || ' ' || g.id::text || $3) FROM gone g
        """

    /// Upserts the bindings of `$1`, announcing each on `$2` as `added` (a new row) or `refreshed`
    /// (it replaced one), `<kind> <aor> <id>$3`; returns the `id` of each row written (a binding
    /// whose extension is gone writes none).
    static let upsertSQL = """
        WITH written AS (
            INSERT INTO bindings (id, extension_id, aor, contact, instance, reg_id, q, call_id, cseq, registered_at,
                expires_at, path, user_agent, flow_transport, flow_source, flow_connection, flow_local, flow_instance,
                updated_at)
            SELECT r.id, e.id, r.aor, r.contact, r.instance, r.reg_id, r.q, r.call_id, r.cseq,
                to_timestamp(r.registered_at), to_timestamp(r.expires_at), ARRAY(SELECT jsonb_array_elements_text(r.path)),
                r.user_agent, r.flow_transport, r.flow_source, r.flow_connection, r.flow_local, r.flow_instance, now()
            FROM jsonb_to_recordset($1::jsonb) AS r(id uuid, aor text, contact text, instance text, reg_id integer,
                q double precision, call_id text, cseq bigint, registered_at double precision, expires_at double precision,
                path jsonb, user_agent text, flow_transport text, flow_source text, flow_connection text, flow_local text,
                flow_instance text)
            CROSS JOIN LATERAL (
                -- One index lookup per row: a join would let the planner scan every extension.
                SELECT x.id FROM extensions x JOIN sip_domains d ON d.id = x.domain_id
                WHERE d.domain = split_part(r.aor, '@', 2) AND x.number = split_part(r.aor, '@', 1)
            ) AS e
            ORDER BY r.id
            ON CONFLICT (id) DO UPDATE SET
                extension_id = EXCLUDED.extension_id, aor = EXCLUDED.aor, contact = EXCLUDED.contact,
                instance = EXCLUDED.instance, reg_id = EXCLUDED.reg_id, q = EXCLUDED.q, call_id = EXCLUDED.call_id,
                cseq = EXCLUDED.cseq, registered_at = EXCLUDED.registered_at, expires_at = EXCLUDED.expires_at,
                path = EXCLUDED.path, user_agent = EXCLUDED.user_agent, flow_transport = EXCLUDED.flow_transport,
                flow_source = EXCLUDED.flow_source, flow_connection = EXCLUDED.flow_connection,
                flow_local = EXCLUDED.flow_local, flow_instance = EXCLUDED.flow_instance, updated_at = now()
            RETURNING id, aor, (xmax = 0) AS inserted
        )
        SELECT w.id::text,
            pg_notify($2, CASE WHEN w.inserted THEN 'added ' ELSE 'refreshed ' END || w.aor || ' ' || w.id::text || $3)
        FROM written w
        """

    /// The push channels of `$1` whose binding was written (exists now).
    static let insertChannelsSQL = """
        INSERT INTO binding_push_channels (binding_id, position, provider, family, token, param, kind)
        SELECT r.binding_id, r.position, r.provider, r.family, r.token, r.param, r.kind
        FROM jsonb_to_recordset($1::jsonb) AS r(binding_id uuid, position integer, provider text, family text,
            token text, param text, kind text)
        WHERE EXISTS (SELECT 1 FROM bindings b WHERE b.id = r.binding_id)
        """

    /// A token registered again is alive: its dead mark goes (for bindings that were written).
    static let clearDeadMarksSQL = """
        DELETE FROM push_dead_tokens p
        USING jsonb_to_recordset($1::jsonb) AS r(binding_id uuid, family text, token text)
        WHERE p.family = r.family AND p.token = r.token AND EXISTS (SELECT 1 FROM bindings b WHERE b.id = r.binding_id)
        """

    /// A token registered here is this device's now (decisions.md): another extension's *posted*
    /// copy of it goes, as the bindings of other extensions lose it, so the old extension stops
    /// pushing that phone. The delete reaches every instance through the replica's change log
    /// (its trigger notes a `posted` change); each extension that lost one is announced on
    /// `rouse_posted_tokens` as `removed <number@domain>`. Posted copies on the binding's own
    /// extension stay (they are the same device, pushed once per call).
    static let takePostedSQL = """
        WITH gone AS (
            DELETE FROM posted_push_tokens p
            USING jsonb_to_recordset($1::jsonb) AS r(binding_id uuid, family text, token text), bindings b
            WHERE b.id = r.binding_id AND p.family = r.family AND p.token = r.token AND p.extension_id <> b.extension_id
            RETURNING p.extension_id
        )
        SELECT pg_notify($2, 'removed ' || e.number || '@' || d.domain)
        FROM (SELECT DISTINCT extension_id FROM gone) g JOIN extensions e ON e.id = g.extension_id
            JOIN sip_domains d ON d.id = e.domain_id
        """

    static func encodeBindings(_ bindings: [Binding]) -> JSONText {
        var json = JSONText(capacity: bindings.count * 512)
        json.beginArray()
        for binding in bindings {
            json.beginObject()
            json.field("id", uuid: binding.id)
            json.field("aor", number: binding.aor.number, domain: binding.aor.domain)
            json.field("contact", binding.contact)
            json.field("instance", binding.instance.map(StorableText.escapingNUL))
            json.field("reg_id", binding.regID)
            json.field("q", binding.q)
            json.field("call_id", binding.callID)
            json.field("cseq", Int(binding.cseq))
            json.field("registered_at", epochSeconds: binding.registeredAt)
            json.field("expires_at", epochSeconds: binding.expiresAt)
            json.field("path", strings: binding.path.map(StorableText.escapingNUL))
            json.field("user_agent", binding.userAgent.map(StorableText.escapingNUL))
            json.field("flow_transport", binding.flow.transport.rawValue)
            json.field("flow_source", binding.flow.sourceText)
            json.field("flow_connection", binding.flow.connectionID.name)
            json.field("flow_local", binding.flow.localPointText)
            json.field("flow_instance", binding.flow.instanceID)
            json.endObject()
        }
        json.endArray()
        return json
    }

    /// The push channels of `bindings`, one row each (a token repeated within a binding counts once).
    static func encodeChannels(of bindings: [Binding]) -> (json: JSONText, count: Int) {
        var json = JSONText(capacity: 256)
        var count = 0
        json.beginArray()
        for binding in bindings {
            var seen: Set<String> = []
            for (position, channel) in binding.pushChannels.enumerated() {
                guard seen.insert(channel.family.rawValue + " " + channel.token).inserted else { continue }
                json.beginObject()
                json.field("binding_id", uuid: binding.id)
                json.field("position", position)
                json.field("provider", channel.provider.rawValue)
                json.field("family", channel.family.rawValue)
                json.field("token", channel.token)
                json.field("param", channel.param)
                json.field("kind", channel.kind.rawValue)
                json.endObject()
                count += 1
            }
        }
        json.endArray()
        return (json, count)
    }

    /// A PostgreSQL array literal of uuids (their text holds only hex digits and hyphens).
    static func uuidArray(_ ids: [UUID]) -> String {
        var bytes: [UInt8] = [UInt8(ascii: "{")]
        bytes.reserveCapacity(ids.count * 37 + 2)
        for (index, id) in ids.enumerated() {
            if index > 0 { bytes.append(UInt8(ascii: ",")) }
            UUIDText.append(id, to: &bytes)
        }
        bytes.append(UInt8(ascii: "}"))
        return String(decoding: bytes, as: UTF8.self)
    }

    // MARK: - Reading

    private static let columns = """
        b.id::text, b.aor, b.contact, b.instance, b.reg_id, b.q, b.call_id, b.cseq,
            extract(epoch FROM b.registered_at), extract(epoch FROM b.expires_at), array_to_json(b.path),
            b.user_agent, b.flow_transport, b.flow_source, b.flow_connection, b.flow_local, b.flow_instance,
            coalesce((SELECT json_agg(json_build_array(c.provider, c.token, c.param, c.kind) ORDER BY c.position)
                FROM binding_push_channels c WHERE c.binding_id = b.id), '[]'::json)
        """

    /// The first page of every live binding, in primary-key order (`$2` rows at most).
    static let loadFirstPageSQL = """
        SELECT \(columns) FROM bindings b WHERE b.expires_at > to_timestamp($1)
        ORDER BY b.id LIMIT $2
        """

    /// The page after the binding id `$3` (keyset pagination: an index range scan of the primary
    /// key, so every page costs the same however far into the table it is).
    static let loadNextPageSQL = """
        SELECT \(columns) FROM bindings b WHERE b.expires_at > to_timestamp($1) AND b.id > $3::uuid
        ORDER BY b.id LIMIT $2
        """

    /// Rows one statement of the full load reads: small enough that a page takes a fraction of a
    /// second (far below any `statement_timeout`), large enough that a million bindings take a few
    /// hundred round trips.
    static let defaultPageSize = 5000

    static let loadOneSQL = """
        SELECT \(columns) FROM bindings b WHERE b.aor = $2 AND b.expires_at > to_timestamp($1)
        ORDER BY b.registered_at, b.id
        """

    static let loadManySQL = """
        SELECT \(columns) FROM bindings b
        WHERE b.aor IN (SELECT jsonb_array_elements_text($2::jsonb)) AND b.expires_at > to_timestamp($1)
        ORDER BY b.aor, b.registered_at, b.id
        """

    static let deleteExpiredSQL = """
        WITH gone AS (DELETE FROM bindings WHERE expires_at < to_timestamp($1) RETURNING *)
        SELECT \(columns) FROM gone b ORDER BY b.aor, b.id
        """

    /// The live bindings of one extension, or of all. All are read in pages of `pageSize`, each its
    /// own short statement (inside the caller's transaction when it has one, so a snapshot read
    /// stays one snapshot), and come back ordered by registration time then id — as one
    /// extension's do — so each extension's list is in the order it was before.
    static func load(_ connection: PostgresConnection, aor: AddressOfRecord?, now: Date, pageSize: Int = defaultPageSize) throws -> [Binding] {
        if let aor {
            return try connection.query(loadOneSQL, PostgresParameters([String(now.timeIntervalSince1970), aor.description]), reading: decodeBindings)
        }
        var bindings: [Binding] = []
        var after: UUID?
        repeat {
            let page = try loadPage(connection, after: after, now: now, limit: pageSize)
            bindings.append(contentsOf: page)
            after = page.count < pageSize ? nil : page.last?.id
        } while after != nil
        // Stable: bindings registered at the same time stay in id order.
        bindings.sort { $0.registeredAt < $1.registeredAt }
        return bindings
    }

    /// Every live binding, one list per extension, each list ordered as `load(_:aor:now:)` orders
    /// one extension's. Read in pages as `load` reads them, each page's bindings put in their lists
    /// as it comes, so no array of every binding is built and sorted (a million at start-up).
    static func loadByExtension(_ connection: PostgresConnection, now: Date, pageSize: Int = defaultPageSize) throws -> [AddressOfRecord: [Binding]] {
        var lists: [AddressOfRecord: [Binding]] = [:]
        // Sized once from PostgreSQL's estimate of the rows (a hint: the count may have moved since).
        if let estimate = try connection.query("SELECT reltuples::bigint FROM pg_class WHERE oid = 'bindings'::regclass").rows.first?[0]
            .flatMap({ Int($0) }), estimate > 0 {
            lists.reserveCapacity(min(estimate, 10_000_000))
        }
        // Each page's rows are decoded on every core, while PostgreSQL reads the next page (its
        // statement is sent first, after the page's last id).
        let threads = [Void](repeating: (), count: ConcurrentMap.threads)
        try sendPage(connection, after: nil, now: now, limit: pageSize)
        var more = true
        while more {
            let page = try connection.receive { rows in
                more = rows.count >= pageSize
                if more {
                    guard let last = rows.bytes(rows.count - 1, 0).flatMap(UUIDText.parse(utf8:)) else {
                        throw PostgresError(kind: .unexpectedResult, message: "a stored binding has an unreadable id")
                    }
                    try sendPage(connection, after: last, now: now, limit: pageSize)
                }
                return try ConcurrentMap.map(count: rows.count, states: threads) { _, index in try decodeBinding(rows, index) }
            }
            for case let binding? in page { lists[binding.aor, default: []].append(binding) }
        }
        // Each list is in id order: stable, bindings registered at the same time stay so.
        for (aor, list) in lists where list.count > 1 {
            lists[aor] = list.sorted { $0.registeredAt < $1.registeredAt }
        }
        return lists
    }

    /// One page of the live bindings: at most `limit`, those whose id sorts after `after` (from the
    /// first when nil), in id order. One statement.
    static func loadPage(_ connection: PostgresConnection, after: UUID?, now: Date, limit: Int) throws -> [Binding] {
        let statement = pageStatement(after: after, now: now, limit: limit)
        return try connection.query(statement.sql, statement.parameters, reading: decodeBindings)
    }

    /// One page's statement: the first page, or the one after the binding id `after`.
    private static func pageStatement(after: UUID?, now: Date, limit: Int) -> (sql: String, parameters: PostgresParameters) {
        let epoch = String(now.timeIntervalSince1970)
        let size = String(max(1, limit))
        if let after { return (loadNextPageSQL, PostgresParameters([epoch, size, UUIDText.string(after)])) }
        return (loadFirstPageSQL, PostgresParameters([epoch, size]))
    }

    /// Sends one page's statement, its answer read later (`PostgresConnection.receive`).
    private static func sendPage(_ connection: PostgresConnection, after: UUID?, now: Date, limit: Int) throws {
        let statement = pageStatement(after: after, now: now, limit: limit)
        try connection.send(statement.sql, statement.parameters)
    }

    /// The live bindings of the extensions whose stored texts are `aors`, one list per extension
    /// (empty when it has none).
    static func load(_ connection: PostgresConnection, aors: Set<String>, now: Date) throws -> [AddressOfRecord: [Binding]] {
        var found: [AddressOfRecord: [Binding]] = [:]
        for text in aors {
            if let aor = address(text) { found[aor] = [] }
        }
        guard !found.isEmpty else { return found }
        let bindings = try connection.query(
            loadManySQL, PostgresParameters([String(now.timeIntervalSince1970), JSONText.array(of: Array(aors))]), reading: decodeBindings)
        for binding in bindings { found[binding.aor, default: []].append(binding) }
        return found
    }

    /// A stored address of record: `number@domain`, taken apart at the last `@` when it does not
    /// parse (a number the directory allowed before today's rules).
    static func address(_ text: String) -> AddressOfRecord? {
        if let parsed = AddressOfRecord(parsing: text) { return parsed }
        guard let at = text.lastIndex(of: "@") else { return nil }
        return AddressOfRecord(number: String(text[..<at]), domain: String(text[text.index(after: at)...]))
    }

    static func deleteExpired(_ connection: PostgresConnection, before date: Date) throws -> [Binding] {
        let bindings = try connection.query(deleteExpiredSQL, PostgresParameters([String(date.timeIntervalSince1970)]), reading: decodeBindings)
        try announce(
            bindings.map { BindingNotification(kind: .expired, aor: $0.aor, bindingID: $0.id).payload }, on: connection)
        return bindings
    }

    /// Every row of a result of `columns`, decoded.
    static func decodeBindings(_ rows: PostgresResultView) throws -> [Binding] {
        try (0..<rows.count).map { try decodeBinding(rows, $0) }
    }

    /// Row `row` of a result of `columns`, read in place: a String only for the texts a binding
    /// keeps.
    static func decodeBinding(_ rows: PostgresResultView, _ row: Int) throws -> Binding {
        func required(_ column: Int) throws -> UnsafeBufferPointer<UInt8> {
            guard let value = rows.bytes(row, column) else {
                throw PostgresError(kind: .unexpectedResult, message: "a stored binding lacks a required column")
            }
            return value
        }
        func text(_ column: Int) throws -> String { String(decoding: try required(column), as: UTF8.self) }
        guard let id = UUIDText.parse(utf8: try required(0)) else {
            throw PostgresError(kind: .unexpectedResult, message: "a stored binding has an unreadable id")
        }
        guard let aor = address(try text(1)) else {
            throw PostgresError(kind: .unexpectedResult, message: "binding \(id) has an unreadable address of record")
        }
        guard
            let flow = BindingFlow(
                storedTransport: try text(12), source: try text(13), connectionID: try text(14), localPoint: try text(15),
                instanceID: try text(16))
        else {
            throw PostgresError(kind: .unexpectedResult, message: "binding \(id) has an unknown flow transport")
        }
        let path = JSONArrayReader.strings(utf8: try required(10)) ?? []
        let channels: [PushChannel] = (JSONArrayReader.elements(utf8: try required(17)) ?? []).compactMap { element in
            guard case .array(let item) = element, item.count == 4, let providerName = item[0].text,
                let provider = PushProvider(rawValue: providerName), let token = item[1].text, let kindName = item[3].text,
                let kind = PushChannelKind(rawValue: kindName)
            else { return nil }
            return PushChannel(provider: provider, token: token, param: item[2].text, kind: kind)
        }
        return Binding(
            id: id, aor: aor, contact: try text(2), instance: rows.string(row, 3), regID: rows.integer(row, 4).map { Int($0) },
            q: rows.double(row, 5), callID: try text(6), cseq: UInt32(clamping: rows.integer(row, 7) ?? 0),
            registeredAt: Date(timeIntervalSince1970: rows.double(row, 8) ?? 0),
            expiresAt: Date(timeIntervalSince1970: rows.double(row, 9) ?? 0),
            path: path, userAgent: rows.string(row, 11),
            flow: flow, pushChannels: channels)
    }

    // MARK: - Dead tokens

    static func deadTokens(_ connection: PostgresConnection, among channels: [PushChannel]) throws -> [DeadPushToken] {
        var json = JSONText(capacity: channels.count * 128)
        json.beginArray()
        for channel in channels {
            json.beginObject()
            json.field("family", channel.family.rawValue)
            json.field("token", channel.token)
            json.endObject()
        }
        json.endArray()
        let rows = try connection.query(
            """
            SELECT DISTINCT p.family, p.token, p.reason, extract(epoch FROM p.marked_at)
            FROM push_dead_tokens p JOIN jsonb_to_recordset($1::jsonb) AS r(family text, token text)
                ON p.family = r.family AND p.token = r.token
            """,
            [json.text])
        return rows.rows.compactMap { row in
            guard let familyName = row[0], let family = PushProviderFamily(rawValue: familyName), let token = row[1]
            else { return nil }
            return DeadPushToken(
                family: family, token: token, reason: row[2] ?? "",
                markedAt: Date(timeIntervalSince1970: row[3].flatMap { Double($0) } ?? 0))
        }
    }
}
