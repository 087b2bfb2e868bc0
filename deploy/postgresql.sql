-- The PostgreSQL role and database Rouse uses (deploy/README.md). Run once, as PostgreSQL's
-- superuser, on the database server:
--
--   sudo -u postgres psql -v ON_ERROR_STOP=1 -f deploy/postgresql.sql
--
-- Rouse creates and upgrades its own tables (migrations at `rouse serve` start, or
-- `rouse migrate`), so the role owns the database and needs nothing else: no superuser, no
-- CREATEDB, no CREATEROLE.
--
-- On the same machine, the default database_url (host=/var/run/postgresql dbname=rouse) connects
-- over the Unix socket as the operating-system user `rouse`, which the default `peer`
-- authentication of Debian's pg_hba.conf accepts without a password. Instances on other machines
-- connect over TCP with a password: set one with `\password rouse` in psql, and give it to Rouse
-- in a file (PGPASSFILE) or the environment, never on the command line.

CREATE ROLE rouse LOGIN;

CREATE DATABASE rouse OWNER rouse ENCODING 'UTF8' TEMPLATE template0;

\connect rouse

-- Rouse's tables live in the public schema; on PostgreSQL 14 and older everyone may create
-- there, from 15 on its owner may. Give it to Rouse and take it from everyone else.
ALTER SCHEMA public OWNER TO rouse;
REVOKE ALL ON SCHEMA public FROM PUBLIC;
