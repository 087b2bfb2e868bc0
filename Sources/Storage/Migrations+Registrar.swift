extension Migrator {
    /// Versions 10–99: organisations, extensions, bindings and their push channels.
    static let registrarMigrations: [Migration] = [
        Migration(
            version: 10, name: "directory, bindings and push channels",
            sql: """
                CREATE TABLE sip_domains (
                    id bigserial PRIMARY KEY,
                    domain text NOT NULL UNIQUE,
                    created_at timestamptz NOT NULL DEFAULT now()
                );
                CREATE TABLE extensions (
                    id bigserial PRIMARY KEY,
                    domain_id bigint NOT NULL REFERENCES sip_domains (id),
                    number text NOT NULL,
                    ha1_md5 text NOT NULL,
                    ha1_sha256 text NOT NULL,
                    created_at timestamptz NOT NULL DEFAULT now(),
                    updated_at timestamptz NOT NULL DEFAULT now(),
                    UNIQUE (domain_id, number)
                );
                CREATE TABLE bindings (
                    id uuid PRIMARY KEY,
                    extension_id bigint NOT NULL REFERENCES extensions (id) ON DELETE CASCADE,
                    aor text NOT NULL,
                    contact text NOT NULL,
                    instance text,
                    reg_id integer,
                    q double precision,
                    call_id text NOT NULL,
                    cseq bigint NOT NULL,
                    registered_at timestamptz NOT NULL,
                    expires_at timestamptz NOT NULL,
                    path text[] NOT NULL DEFAULT '{}',
                    user_agent text,
                    flow_transport text NOT NULL,
                    flow_source text NOT NULL,
                    flow_connection text NOT NULL,
                    flow_local text NOT NULL,
                    flow_instance text NOT NULL,
                    updated_at timestamptz NOT NULL DEFAULT now()
                );
                CREATE INDEX bindings_aor_idx ON bindings (aor);
                CREATE INDEX bindings_expires_at_idx ON bindings (expires_at);
                CREATE INDEX bindings_extension_id_idx ON bindings (extension_id);
                CREATE TABLE binding_push_channels (
                    binding_id uuid NOT NULL REFERENCES bindings (id) ON DELETE CASCADE,
                    position integer NOT NULL DEFAULT 0,
                    provider text NOT NULL,
                    family text NOT NULL,
                    token text NOT NULL,
                    param text,
                    kind text NOT NULL,
                    PRIMARY KEY (binding_id, family, token)
                );
                CREATE INDEX binding_push_channels_token_idx ON binding_push_channels (family, token);
                CREATE TABLE push_dead_tokens (
                    family text NOT NULL,
                    token text NOT NULL,
                    reason text NOT NULL,
                    marked_at timestamptz NOT NULL DEFAULT now(),
                    PRIMARY KEY (family, token)
                );
                """),
        Migration(
            version: 11, name: "posted push tokens",
            sql: """
                CREATE TABLE posted_push_tokens (
                    family text NOT NULL,
                    token text NOT NULL,
                    extension_id bigint NOT NULL REFERENCES extensions (id) ON DELETE CASCADE,
                    provider text NOT NULL,
                    param text,
                    kind text NOT NULL,
                    device_id text,
                    posted_at timestamptz NOT NULL DEFAULT now(),
                    PRIMARY KEY (family, token)
                );
                CREATE INDEX posted_push_tokens_extension_id_idx ON posted_push_tokens (extension_id);
                """),
    ]
}
