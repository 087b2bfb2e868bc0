import Foundation
public import Push
import Registrar
public import RouseVocabulary

/// The operator's push apps in PostgreSQL (`push_apps`). The key text is stored sealed in its own
/// column (`SealedSecrets`, bound to the app's id) and is returned only to the push service
/// (`all()`), never listed (`summaries()`).
///
/// Threading: not thread-safe, like the `PostgresConnection` it uses; every call blocks until
/// PostgreSQL answers, so it belongs to a command-line run or a storage worker, never the SIP path.
public struct PostgresPushApps {
    let connection: PostgresConnection

    public init(connection: PostgresConnection) {
        self.connection = connection
    }

    /// What `push-app list` shows of an app: everything but the key.
    public struct Summary: Sendable, Equatable {
        public let id: Int64
        public let kind: String
        public let param: String
        public let environment: String?
        /// Team/key id and topic (APNs) or project and account (FCM).
        public let details: String
        public let createdAt: String
    }

    /// Validates and stores `app`; returns its id and the validation notes.
    public func add(_ app: PushApp) throws -> (id: Int64, notes: [String]) {
        let notes = try app.validate()
        let (fields, key, environment) = Self.columns(of: app)
        // The id first: the sealed key is bound to it.
        guard let id = try connection.query("SELECT nextval(pg_get_serial_sequence('push_apps', 'id')) AS id").value(0, "id").flatMap({ Int64($0) })
        else {
            throw PostgresError(kind: .unexpectedResult, message: "PostgreSQL at \(connection.endpoint): push_apps has no id sequence")
        }
        let sealedKey = try connection.sealSecret(key, context: Self.keyContext(id))
        do {
            try connection.query(
                "INSERT INTO push_apps (id, kind, fields, key_text, param, environment, direct_boot_ok) VALUES ($1::bigint, $2, $3::jsonb, $4, $5, $6, $7)",
                [String(id), app.kind, fields, sealedKey, app.param, environment, app.directBootOK ? "true" : "false"])
            try Self.announceChange(on: connection)
            return (id, notes)
        } catch let error as PostgresError where error.isUniqueViolation {
            throw PushAppError(
                field: "param",
                problem: app.param.isEmpty
                    ? "there already is a default \(app.kind) app (one with no --param)"
                    : "there already is an \(app.kind) app answering to \(app.param)")
        }
    }

    /// Every app with its key, for the push service.
    public func all() throws -> [PushApp] {
        let rows = try connection.query("SELECT id, kind, fields::text AS fields, key_text, param, environment, direct_boot_ok FROM push_apps ORDER BY id")
        return try rows.rows.indices.compactMap { index in
            try app(
                id: rows.value(index, "id"), kind: rows.value(index, "kind"), fields: rows.value(index, "fields"),
                key: rows.value(index, "key_text"), param: rows.value(index, "param"), environment: rows.value(index, "environment"),
                directBootOK: rows.value(index, "direct_boot_ok"))
        }
    }

    /// One app with its key, or nil.
    public func app(id: Int64) throws -> PushApp? {
        let rows = try connection.query(
            "SELECT id, kind, fields::text AS fields, key_text, param, environment, direct_boot_ok FROM push_apps WHERE id = $1", [String(id)])
        guard !rows.isEmpty else { return nil }
        return try app(
            id: rows.value(0, "id"), kind: rows.value(0, "kind"), fields: rows.value(0, "fields"),
            key: rows.value(0, "key_text"), param: rows.value(0, "param"), environment: rows.value(0, "environment"),
            directBootOK: rows.value(0, "direct_boot_ok"))
    }

    /// Every app without its key.
    public func summaries() throws -> [Summary] {
        let rows = try connection.query(
            "SELECT id, kind, fields::text AS fields, param, environment, direct_boot_ok, to_char(created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI') AS created FROM push_apps ORDER BY id")
        return rows.rows.indices.map { index in
            let fields = Self.decode(rows.value(index, "fields"))
            let kind = rows.value(index, "kind") ?? ""
            let details = kind == "apns"
                ? "team \(fields["team_id"] ?? "?") key \(fields["key_id"] ?? "?") topic \(fields["topic"] ?? "?")"
                : "project \(fields["project_id"] ?? "?") as \(fields["client_email"] ?? "?")"
                    + (rows.value(index, "direct_boot_ok") == "f" ? ", direct boot off" : "")
            return Summary(
                id: Int64(rows.value(index, "id") ?? "0") ?? 0, kind: kind, param: rows.value(index, "param") ?? "",
                environment: rows.value(index, "environment"), details: details, createdAt: rows.value(index, "created") ?? "")
        }
    }

    /// Validates `app` and stores it in place of the app with its `id`, which keeps its kind;
    /// returns the validation notes, or nil when there is no app with that id.
    public func update(_ app: PushApp) throws -> [String]? {
        guard let id = app.id else { return nil }
        let notes = try app.validate()
        let (fields, key, environment) = Self.columns(of: app)
        let idText: String = String(id)
        let sealedKey = try connection.sealSecret(key, context: Self.keyContext(id))
        let parameters: [String?] = [idText, fields, sealedKey, app.param, environment, app.kind, app.directBootOK ? "true" : "false"]
        do {
            let updated = try connection.query(
                """
                UPDATE push_apps SET fields = $2::jsonb, key_text = $3, param = $4, environment = $5, direct_boot_ok = $7
                WHERE id = $1 AND kind = $6
                """,
                parameters)
            guard updated.affectedRows == 1 else { return nil }
            // Inside the do block, as in add(_:): with only the typed-throws query in it, this
            // catch makes the Swift 6.3 compiler hang or crash while generating code.
            try Self.announceChange(on: connection)
            return notes
        } catch let error as PostgresError where error.isUniqueViolation {
            throw PushAppError(
                field: "param",
                problem: app.param.isEmpty
                    ? "there already is a default \(app.kind) app (one with no --param)"
                    : "there already is an \(app.kind) app answering to \(app.param)")
        }
    }

    /// Removes an app; false when there was none with that id.
    @discardableResult
    public func remove(id: Int64) throws -> Bool {
        let removed = try connection.query("DELETE FROM push_apps WHERE id = $1", [String(id)]).affectedRows == 1
        if removed { try Self.announceChange(on: connection) }
        return removed
    }

    /// Channel on which every change to the push apps is announced, so running instances reload them.
    public static let notificationChannel = "rouse_push_apps"

    static func announceChange(on connection: PostgresConnection) throws {
        try connection.query("SELECT pg_notify($1, 'changed')", [notificationChannel])
    }

    /// The provider families some push app serves (RFC 8599 §5.2: the others get 555).
    public static func providerFamilies(on connection: PostgresConnection) throws -> Set<PushProviderFamily> {
        let rows = try connection.query("SELECT DISTINCT kind FROM push_apps")
        return Set(rows.rows.compactMap { $0[0].flatMap(PushProviderFamily.init(rawValue:)) })
    }

    static func columns(of app: PushApp) -> (fields: String, key: String, environment: String?) {
        let fields: [String: String]
        switch app.credentials {
        case .apns(let apns):
            fields = ["team_id": apns.teamID, "key_id": apns.keyID, "topic": apns.topic]
            return (encode(fields), apns.privateKeyPEM, apns.environment?.rawValue)
        case .fcm(let fcm):
            fields = ["project_id": fcm.projectID, "client_email": fcm.clientEmail, "token_uri": fcm.tokenURI]
            return (encode(fields), fcm.privateKeyPEM, nil)
        }
    }

    /// What the sealed key of app `id` is bound to.
    static func keyContext(_ id: Int64) -> String { "push_apps.key_text:\(id)" }

    /// The app of one row, its key opened; nil for a row of an unknown kind.
    func app(
        id: String?, kind: String?, fields: String?, key sealedKey: String?, param: String?, environment: String?, directBootOK: String?
    ) throws -> PushApp? {
        guard let id = id.flatMap({ Int64($0) }), let sealedKey else { return nil }
        let key = try connection.openSecret(sealedKey, context: Self.keyContext(id))
        let values = Self.decode(fields)
        switch kind {
        case "apns":
            return PushApp(
                id: id,
                credentials: .apns(APNsCredentials(
                    teamID: values["team_id"] ?? "", keyID: values["key_id"] ?? "", topic: values["topic"] ?? "",
                    privateKeyPEM: key, environment: environment.flatMap(APNsEnvironment.init(rawValue:)))),
                param: param ?? "")
        case "fcm":
            return PushApp(
                id: id,
                credentials: .fcm(FCMServiceAccount(
                    projectID: values["project_id"] ?? "", clientEmail: values["client_email"] ?? "",
                    privateKeyPEM: key, tokenURI: values["token_uri"] ?? "")),
                param: param ?? "", directBootOK: directBootOK != "f")
        default:
            return nil
        }
    }

    static func encode(_ fields: [String: String]) -> String {
        let data = (try? JSONSerialization.data(withJSONObject: fields, options: [.sortedKeys])) ?? Data("{}".utf8)
        return String(decoding: data, as: UTF8.self)
    }

    static func decode(_ text: String?) -> [String: String] {
        guard let text, let object = try? JSONSerialization.jsonObject(with: Data(text.utf8)) as? [String: Any] else { return [:] }
        return object.compactMapValues { $0 as? String }
    }
}
