extension Migrator {
    /// Versions 400–499: web push. Rouse's VAPID key pair (one row, made by whichever instance
    /// starts first) and the keys of the subscriptions apps post, which live as long as their
    /// posted token (`posted_push_tokens`, family `webpush`, token = the endpoint).
    static let webPushMigrations: [Migration] = [
        Migration(
            version: 400, name: "web push: VAPID key and subscription keys",
            sql: """
                CREATE TABLE webpush_vapid_keys (
                    id smallint PRIMARY KEY CHECK (id = 1),
                    private_key_pem text NOT NULL,
                    public_key text NOT NULL,
                    created_at timestamptz NOT NULL DEFAULT now()
                );
                CREATE TABLE webpush_subscriptions (
                    family text NOT NULL DEFAULT 'webpush' CHECK (family = 'webpush'),
                    endpoint text NOT NULL,
                    p256dh text NOT NULL,
                    auth text NOT NULL,
                    updated_at timestamptz NOT NULL DEFAULT now(),
                    PRIMARY KEY (family, endpoint),
                    FOREIGN KEY (family, endpoint) REFERENCES posted_push_tokens (family, token) ON DELETE CASCADE ON UPDATE CASCADE
                );
                """)
    ]
}
