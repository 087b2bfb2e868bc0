extension Migrator {
    /// Versions 600–699: outbound routes and the class of service of extensions (issue 19: calls to
    /// numbers and domains outside Rouse).
    static let routeMigrations: [Migration] = [
        Migration(
            version: 600, name: "outbound routes",
            sql: """
                CREATE TABLE outbound_routes (
                    id bigserial PRIMARY KEY,
                    domain_id bigint NOT NULL REFERENCES sip_domains (id) ON DELETE CASCADE,
                    name text NOT NULL,
                    position integer NOT NULL,
                    pattern text NOT NULL,
                    strip integer NOT NULL DEFAULT 0 CHECK (strip >= 0),
                    prepend text NOT NULL DEFAULT '',
                    hops jsonb NOT NULL CHECK (jsonb_typeof(hops) = 'array' AND jsonb_array_length(hops) > 0),
                    hop_timeout_ms integer NOT NULL DEFAULT 4000 CHECK (hop_timeout_ms BETWEEN 100 AND 120000),
                    username text,
                    password text,
                    caller_identity text NOT NULL DEFAULT 'asserted-identity',
                    emergency boolean NOT NULL DEFAULT false,
                    created_at timestamptz NOT NULL DEFAULT now(),
                    updated_at timestamptz NOT NULL DEFAULT now(),
                    UNIQUE (domain_id, name)
                );
                CREATE INDEX outbound_routes_domain_idx ON outbound_routes (domain_id, position);
                -- Every writer (an instance, the HTTP API, the command line, a domain's cascade)
                -- announces a change, so every instance reloads its route table.
                CREATE FUNCTION rouse_routes_changed() RETURNS trigger LANGUAGE plpgsql AS $$
                BEGIN
                    PERFORM pg_notify('rouse_routes', 'changed');
                    RETURN NULL;
                END $$;
                CREATE TRIGGER outbound_routes_changed AFTER INSERT OR UPDATE OR DELETE ON outbound_routes
                    FOR EACH STATEMENT EXECUTE FUNCTION rouse_routes_changed();
                """),
        Migration(
            version: 601, name: "class of service",
            sql: """
                -- Toll-fraud guard: how far an extension may call outside (NULL: the instance's
                -- outside_call_class), and which outside numbers an organisation counts as national
                -- (RoutePattern texts; every other outside target is international).
                ALTER TABLE extensions ADD COLUMN call_class text
                    CHECK (call_class IN ('internal', 'national', 'international'));
                ALTER TABLE sip_domains ADD COLUMN national_patterns jsonb NOT NULL DEFAULT '[]'
                    CHECK (jsonb_typeof(national_patterns) = 'array');
                -- A class or patterns changed, or gone with their extension or organisation (a new
                -- one has none): every instance reloads, as for a route.
                CREATE TRIGGER extensions_call_class_changed AFTER DELETE OR UPDATE OF call_class ON extensions
                    FOR EACH STATEMENT EXECUTE FUNCTION rouse_routes_changed();
                CREATE TRIGGER sip_domains_national_patterns_changed AFTER DELETE OR UPDATE OF national_patterns ON sip_domains
                    FOR EACH STATEMENT EXECUTE FUNCTION rouse_routes_changed();
                """),
        Migration(
            version: 604, name: "routes: Diversion header",
            sql: """
                ALTER TABLE outbound_routes ADD COLUMN diversion_header boolean NOT NULL DEFAULT false;
                """),
    ]
}
