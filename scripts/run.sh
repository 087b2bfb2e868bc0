#!/usr/bin/env bash
# `make run`: the embedded default. Installs what is missing, builds Rouse, creates on first use a
# private PostgreSQL cluster and a self-signed TLS certificate under var/ in the checkout, applies
# migrations, makes the first administrator (its password printed once), prints where Rouse
# listens and runs `rouse serve` in the foreground. Ctrl-C stops Rouse, then the cluster.
set -euo pipefail
cd "$(dirname "$0")/.."
top=$(pwd)

bash scripts/deps.sh
echo "rouse: building (release)…" >&2
swift build -c release --product rouse 2>&1 | grep -E 'error|warning: unre|Compiling rouse|Build complete' >&2 || true
rouse="$(swift build -c release --show-bin-path)/rouse"
[ -x "$rouse" ] || { echo "rouse: build failed" >&2; exit 1; }

mkdir -p var
# initdb runs as the postgres user, which may not reach a folder under a private home: the
# cluster lives where it can, and var/pg in the checkout points to it.
if [ ! -e var/pg ]; then
    cluster="/var/lib/rouse-dev/$(printf '%s' "$top" | sha1sum | cut -c1-12)"
    mkdir -p "$(dirname "$cluster")"
    chmod 0755 "$(dirname "$cluster")"
    ln -sfn "$cluster" var/pg
fi
cluster=$(readlink -f var/pg)
pg_port=${ROUSE_PG_PORT:-54329}

if [ ! -f var/tls/cert.pem ]; then
    mkdir -p var/tls
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 3650 \
        -subj "/CN=$(hostname -f 2>/dev/null || hostname)" -addext "subjectAltName=DNS:localhost,IP:127.0.0.1,IP:::1" \
        -keyout var/tls/key.pem -out var/tls/cert.pem 2>/dev/null
    chmod 0600 var/tls/key.pem
    echo "rouse: made a self-signed TLS certificate in var/tls/ (first run)" >&2
fi

# The key that seals secrets in the database (push keys, trunk passwords, password hashes), made
# once, readable by its owner only; without it the data in var/pg cannot be used.
if [ -z "${ROUSE_SECRETS_KEY:-}" ] && [ -z "${ROUSE_SECRETS_KEY_FILE:-}" ]; then
    if [ ! -f var/secrets.key ]; then
        "$rouse" secrets new-key --key-file var/secrets.key >&2
        echo "rouse: made the secrets key var/secrets.key (first run; keep it with backups of var/pg)" >&2
    fi
    export ROUSE_SECRETS_KEY_FILE="$top/var/secrets.key"
fi

stop_cluster() { bash scripts/pg.sh stop "$cluster" || true; }
trap stop_cluster EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
bash scripts/pg.sh start "$cluster" "$pg_port"
pg_url=$(bash scripts/pg.sh url "$cluster" "$pg_port")
# The embedded cluster's database for Rouse.
psql "$pg_url" -qtAc "SELECT 1 FROM pg_database WHERE datname = 'rouse'" | grep -q 1 ||
    psql "$pg_url" -qc "CREATE DATABASE rouse" >/dev/null

export ROUSE_DATABASE_URL=${ROUSE_DATABASE_URL:-$(bash scripts/pg.sh url "$cluster" "$pg_port" rouse)}
export ROUSE_SIP_LISTEN=${ROUSE_SIP_LISTEN:-udp:127.0.0.1:5060,tcp:127.0.0.1:5060,tls:127.0.0.1:5061}
export ROUSE_TLS_CERT=${ROUSE_TLS_CERT:-$top/var/tls/cert.pem}
export ROUSE_TLS_KEY=${ROUSE_TLS_KEY:-$top/var/tls/key.pem}
export ROUSE_HTTP_LISTEN=${ROUSE_HTTP_LISTEN:-127.0.0.1:8080}

"$rouse" migrate "$@"

# The first administrator of the admin pages, made once: its password is printed only now.
admin=$("$rouse" admin add admin --generate-password --if-none "$@")
admin_password=$(printf '%s\n' "$admin" | sed -n 's/^generated password (shown once): //p')

# For a shell in another terminal while this one serves: `. var/env.sh`, then `rouse ...`.
cat >var/env.sh <<ENV
# Written by make run: the rouse command and the database of this checkout's Rouse, for a shell
# in another terminal while make run serves (. var/env.sh; rouse extension list).
export PATH='$(dirname "$rouse")':"\$PATH"
export ROUSE_DATABASE_URL='$ROUSE_DATABASE_URL'
export ROUSE_SECRETS_KEY_FILE='${ROUSE_SECRETS_KEY_FILE:-}'
ENV

# Where it listens, as rouse itself reads its settings (environment, flags given to make run).
settings=$("$rouse" check-config "$@")
sip=$(printf '%s\n' "$settings" | sed -n 's/^  sip_listen: //p' | sed 's/,/, /g')
http=$(printf '%s\n' "$settings" | sed -n 's/^  http_listen: //p')
case "$http" in
0.0.0.0:*) http_url="http://127.0.0.1:${http#0.0.0.0:}" ;;
\[::\]:*) http_url="http://[::1]:${http#\[::\]:}" ;;
*) http_url="http://$http" ;;
esac
cat <<BANNER

  Rouse, from this checkout (data in var/; Ctrl-C stops it)
    SIP          $sip
    HTTP API     $http_url  (health: $http_url/health)
    admin pages  $http_url/admin
BANNER
if [ -n "$admin_password" ]; then
    cat <<BANNER
    first administrator, made now (the password is shown this once):
                 user admin, password $admin_password
BANNER
else
    echo "    administrators: those made before (rouse admin list; rouse admin add NAME makes another)"
fi
cat <<BANNER
    in another terminal: . var/env.sh, then e.g. rouse domain add example.com

BANNER

"$rouse" serve "$@"
