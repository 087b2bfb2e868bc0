public import Push

/// Rouse's VAPID key pair in `webpush_vapid_keys` (migration 400): made once by whichever instance
/// asks first and shared by every instance, so a browser subscribed through one instance is pushed
/// by any. Two instances starting at once agree: the insert does nothing when a key exists, and both
/// read back the one stored.
///
/// The private key is stored sealed (`SealedSecrets`) and never leaves this table except into
/// `VAPIDKeys`; nothing here logs it.
/// Threading: stateless; each function blocks its thread on the connection it is given.
public enum PostgresVAPIDKeys {
    /// The stored key pair, made and stored first when there is none.
    public static func loadOrCreate(on connection: PostgresConnection) throws -> VAPIDKeys {
        if let stored = try load(on: connection) { return stored }
        let made = VAPIDKeys.generate()
        try connection.query(
            "INSERT INTO webpush_vapid_keys (id, private_key_pem, public_key) VALUES (1, $1, $2) ON CONFLICT (id) DO NOTHING",
            [try connection.sealSecret(made.privateKeyPEM, context: context), made.keys.publicKeyBase64URL])
        guard let stored = try load(on: connection) else {
            throw PostgresError(kind: .unexpectedResult, message: "webpush_vapid_keys holds no key after the insert")
        }
        return stored
    }

    /// What the sealed private key is bound to.
    static let context = "webpush_vapid_keys.private_key_pem:1"

    /// The stored key pair, or nil when none was made yet.
    public static func load(on connection: PostgresConnection) throws -> VAPIDKeys? {
        let rows = try connection.query("SELECT private_key_pem FROM webpush_vapid_keys WHERE id = 1")
        guard !rows.isEmpty, let sealed = rows.value(0, "private_key_pem") else { return nil }
        let pem = try connection.openSecret(sealed, context: context)
        do {
            return try VAPIDKeys(privateKeyPEM: pem)
        } catch {
            throw PostgresError(kind: .unexpectedResult, message: "webpush_vapid_keys holds an unusable key: \(error)")
        }
    }
}
