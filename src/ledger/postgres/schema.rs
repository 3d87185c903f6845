//! The PostgreSQL schema: its tables, its version and the secret's check value in `meta`.
//!
//! This file owns every table definition of the PostgreSQL ledger and their creation, which
//! is idempotent and safe when several replicas start at once: `meta` is created first
//! (retrying when another replica created it at the same moment), then the row holding the
//! schema version is locked, so one replica creates the rest while the others wait and find it
//! done. Record columns hold the codec's bytes, exactly as redb stores them; the other columns
//! of `ops` are copies for its indexes. Text keys sort bytewise (`COLLATE "C"`), as redb's do,
//! so pages list in the same order. It never reads or writes an operation.

use super::super::fault::Fault;
use super::super::{Checked, LedgerError};
use super::connect::{Conn, Tx, sqlstate};

/// The schema version this binary writes and knows.
pub(super) const VERSION: i64 = 1;

const META: &str = "CREATE TABLE IF NOT EXISTS meta (key text PRIMARY KEY, value text NOT NULL)";

/// Version 1, created inside the transaction that holds the version row's lock.
const TABLES: &str = r#"
CREATE TABLE IF NOT EXISTS replicas (
    id bigint PRIMARY KEY,
    name text NOT NULL,
    started_at timestamptz NOT NULL,
    expires_at timestamptz NOT NULL
);
CREATE SEQUENCE IF NOT EXISTS replica_ids;
CREATE TABLE IF NOT EXISTS op_locks (id text COLLATE "C" PRIMARY KEY);
CREATE TABLE IF NOT EXISTS ops (
    id text COLLATE "C" PRIMARY KEY,
    state text NOT NULL,
    provider text COLLATE "C" NOT NULL,
    route text COLLATE "C" NOT NULL,
    created_at bigint NOT NULL,
    updated_at bigint NOT NULL,
    fence bigint NOT NULL,
    owner bigint NOT NULL,
    record bytea NOT NULL
);
CREATE INDEX IF NOT EXISTS ops_by_created ON ops (created_at, id);
CREATE INDEX IF NOT EXISTS ops_by_state ON ops (state, created_at, id);
CREATE INDEX IF NOT EXISTS ops_by_provider ON ops (provider, created_at, id);
CREATE INDEX IF NOT EXISTS ops_by_route ON ops (route, created_at, id);
CREATE INDEX IF NOT EXISTS ops_by_age ON ops (state, updated_at);
CREATE INDEX IF NOT EXISTS ops_in_flight ON ops (owner) WHERE state = 'in_flight';
CREATE TABLE IF NOT EXISTS events (
    id text COLLATE "C" NOT NULL,
    seq integer NOT NULL,
    record bytea NOT NULL,
    PRIMARY KEY (id, seq)
);
CREATE TABLE IF NOT EXISTS responses (id text COLLATE "C" PRIMARY KEY, record bytea NOT NULL);
CREATE TABLE IF NOT EXISTS requests (id text COLLATE "C" PRIMARY KEY, sealed bytea NOT NULL);
CREATE TABLE IF NOT EXISTS tombstones (
    id text COLLATE "C" PRIMARY KEY,
    pruned_at bigint NOT NULL,
    record bytea NOT NULL
);
CREATE INDEX IF NOT EXISTS tombstones_by_age ON tombstones (pruned_at, id);
CREATE TABLE IF NOT EXISTS replays (
    id text COLLATE "C" PRIMARY KEY,
    count bigint NOT NULL,
    first_at bigint NOT NULL,
    last_at bigint NOT NULL
);
"#;

/// The SQLSTATE `WRITE` raises when a new claim finds this replica's lease lapsed.
pub(super) const LEASE_LAPSED: &str = "IP001";

/// The channel on which a change to a final operation (`succeeded`, `failed`) is announced to
/// every replica: the payload is its ID, or `*` for "forget everything" (a prune).
pub(super) const CHANGED: &str = "idemproxy_changed";

/// The server-side halves of `update`, installed (replaced) at every start under the version
/// row's lock, so a database an older build created gains them. Their names carry a version:
/// a change to what one takes or does is a new name, so replicas of two builds can share one
/// database while a rolling restart runs.
///
/// `idemproxy_read_v1` takes the operation's lock row and then reads it (a statement of its
/// own, so its snapshot sees what the lock's previous holder committed): the record, whether
/// it is `in_flight` under a lapsed owner, and the tombstone when nothing is live.
///
/// `idemproxy_write_v1` applies one `Write` (`p_record` null when the operation is unchanged;
/// `p_request` 0 keep, 1 store `p_sealed`, 2 erase), refuses a new claim (`p_claim`) when this
/// replica's lease is not live by the database's clock (`LEASE_LAPSED`), announces a change to
/// a final operation (`p_notify`), and makes the commit asynchronous when nothing durable
/// changed (`p_durable` false and no kept request erased).
const FUNCTIONS: &str = r#"
CREATE OR REPLACE FUNCTION idemproxy_read_v1(p_id text, p_me bigint,
    OUT record bytea, OUT lapsed boolean, OUT tomb bytea)
LANGUAGE plpgsql VOLATILE AS $f$
BEGIN
    INSERT INTO op_locks (id) VALUES (p_id) ON CONFLICT (id) DO UPDATE SET id = EXCLUDED.id;
    SELECT o.record, (o.state = 'in_flight' AND o.owner <> p_me AND NOT EXISTS
        (SELECT 1 FROM replicas r WHERE r.id = o.owner AND r.expires_at > now()))
        INTO record, lapsed FROM ops o WHERE o.id = p_id;
    IF NOT FOUND THEN
        lapsed := false;
        SELECT t.record INTO tomb FROM tombstones t WHERE t.id = p_id;
    END IF;
END
$f$;

CREATE OR REPLACE FUNCTION idemproxy_write_v1(p_id text, p_me bigint, p_record bytea,
    p_state text, p_provider text, p_route text, p_created bigint, p_updated bigint,
    p_fence bigint, p_events bytea[], p_response bytea, p_request smallint, p_sealed bytea,
    p_claim boolean, p_durable boolean, p_notify boolean)
RETURNS void LANGUAGE plpgsql VOLATILE AS $f$
DECLARE
    durable boolean := p_durable;
BEGIN
    IF p_record IS NOT NULL THEN
        INSERT INTO ops (id, state, provider, route, created_at, updated_at, fence, owner, record)
        VALUES (p_id, p_state, p_provider, p_route, p_created, p_updated, p_fence,
            p_fence >> 32, p_record)
        ON CONFLICT (id) DO UPDATE SET state = EXCLUDED.state, provider = EXCLUDED.provider,
            route = EXCLUDED.route, created_at = EXCLUDED.created_at,
            updated_at = EXCLUDED.updated_at, fence = EXCLUDED.fence, owner = EXCLUDED.owner,
            record = EXCLUDED.record;
    END IF;
    IF cardinality(p_events) > 0 THEN
        INSERT INTO events (id, seq, record)
        SELECT p_id, COALESCE((SELECT MAX(seq) FROM events WHERE id = p_id), -1) + t.ord, t.rec
        FROM unnest(p_events) WITH ORDINALITY AS t (rec, ord);
    END IF;
    IF p_response IS NOT NULL THEN
        INSERT INTO responses (id, record) VALUES (p_id, p_response)
        ON CONFLICT (id) DO UPDATE SET record = EXCLUDED.record;
    END IF;
    IF p_request = 1 THEN
        INSERT INTO requests (id, sealed) VALUES (p_id, p_sealed)
        ON CONFLICT (id) DO UPDATE SET sealed = EXCLUDED.sealed;
    ELSIF p_request = 2 THEN
        DELETE FROM requests WHERE id = p_id;
        IF FOUND THEN
            durable := true;
        END IF;
    END IF;
    IF p_claim AND NOT EXISTS
        (SELECT 1 FROM replicas WHERE id = p_me AND expires_at > clock_timestamp()) THEN
        RAISE EXCEPTION 'this replica''s lease lapsed' USING ERRCODE = 'IP001';
    END IF;
    IF p_notify THEN
        PERFORM pg_notify('idemproxy_changed',
            CASE WHEN octet_length(p_id) <= 7000 THEN p_id ELSE '*' END);
    END IF;
    IF NOT durable THEN
        PERFORM set_config('synchronous_commit', 'off', true);
    END IF;
END
$f$;
"#;

/// SQLSTATEs of two replicas creating one catalog entry at the same moment.
const RACED: [&str; 3] = ["23505", "42P07", "42710"];

/// What `prepare` found: the ledger is ready, or kept another secret check value.
pub(super) enum Prepared {
    Ready,
    OtherSecret,
}

/// Creates the schema if needed and checks its version and the secret's check value (kept
/// by the first start). Nothing is written when either check fails.
pub(super) async fn prepare(
    pool: &deadpool_postgres::Pool,
    secret_check: Option<&str>,
) -> Result<Result<Prepared, i64>, Fault> {
    create_meta(pool).await?;
    let mut tx = Conn::get(pool).await?.begin().await?;
    // Replicas starting together wait here while one creates the schema, however long that
    // takes (the open's own bound applies), not the session's short `lock_timeout`.
    tx.batch("SET LOCAL lock_timeout = 0").await?;
    tx.execute(
        "INSERT INTO meta (key, value) VALUES ('schema_version', '0') ON CONFLICT (key) DO NOTHING",
        &[],
    )
    .await?;
    let row = tx
        .query_opt(
            "SELECT value FROM meta WHERE key = 'schema_version' FOR UPDATE",
            &[],
        )
        .await?;
    let found = version_of(row.map(|r| r.get::<_, String>(0)).as_deref())?;
    if found > VERSION {
        tx.rollback().await;
        return Ok(Err(found));
    }
    // A ledger `ledger copy` is still filling (or left half filled) holds only part of its
    // source: serving it would forget operations that happened.
    let copying = tx
        .query_opt("SELECT 1 FROM meta WHERE key = 'copy_unfinished'", &[])
        .await?;
    if copying.is_some() {
        tx.rollback().await;
        return Err(Fault::new(super::super::copy::page::UNFINISHED.to_owned()));
    }
    if found < VERSION {
        tx.batch(TABLES).await?;
        tx.execute(
            "UPDATE meta SET value = $1 WHERE key = 'schema_version'",
            &[&VERSION.to_string()],
        )
        .await?;
    }
    tx.batch(FUNCTIONS).await?;
    if let Some(check) = secret_check
        && !keep_secret_check(&tx, check).await?
    {
        tx.rollback().await;
        return Ok(Ok(Prepared::OtherSecret));
    }
    tx.commit(true).await?;
    Ok(Ok(Prepared::Ready))
}

/// `CREATE TABLE IF NOT EXISTS` is not safe against a concurrent creator (it may fail on the
/// catalog's unique index); the loser tries again and finds the table.
async fn create_meta(pool: &deadpool_postgres::Pool) -> Result<(), Fault> {
    let mut last = None;
    for _ in 0..5 {
        let conn = Conn::get(pool).await?;
        // In a transaction of its own, so the session's `lock_timeout` is lifted for it alone.
        let sql = format!("BEGIN; SET LOCAL lock_timeout = 0; {META}; COMMIT");
        let done = conn.batch(&sql).await;
        if done.is_err() {
            // The failed statement left the transaction open: end it before the connection
            // goes back to the pool.
            let _ = conn.batch("ROLLBACK").await;
        }
        match done {
            Ok(()) => return Ok(()),
            Err(e) if sqlstate(&e).is_some_and(|s| RACED.contains(&s)) => last = Some(e),
            Err(e) => return Err(e.into()),
        }
    }
    Err(last.map_or_else(|| Fault::new("cannot create meta".into()), Fault::from))
}

fn version_of(value: Option<&str>) -> Result<i64, Fault> {
    let Some(value) = value else { return Ok(0) };
    value
        .parse()
        .map_err(|_| Fault::new(format!("meta.schema_version is not a number: {value:?}")))
}

/// Keeps `check` when the ledger has none yet; whether the one it keeps (now) is `check`.
async fn keep_secret_check(tx: &Tx, check: &str) -> Result<bool, Fault> {
    tx.execute(
        "INSERT INTO meta (key, value) VALUES ('secret_check', $1) ON CONFLICT (key) DO NOTHING",
        &[&check],
    )
    .await?;
    let kept = tx
        .query_opt("SELECT value FROM meta WHERE key = 'secret_check'", &[])
        .await?;
    Ok(kept.is_some_and(|row| row.get::<_, String>(0) == check))
}

/// `Ledger::check` on a database: reads `meta` only, writes nothing.
pub(super) async fn check(
    pool: &deadpool_postgres::Pool,
    shown: &str,
    secret_check: &str,
) -> Result<Checked, LedgerError> {
    let unreachable = |fault: Fault| LedgerError::Open {
        path: shown.to_owned(),
        reason: fault.to_string(),
    };
    let conn = Conn::get(pool).await.map_err(unreachable)?;
    let rows = match conn
        .raw_query(
            "SELECT key, value FROM meta \
             WHERE key IN ('schema_version', 'secret_check', 'copy_unfinished')",
        )
        .await
    {
        Ok(rows) => rows,
        // 42P01: no `meta` table: nothing was ever created here.
        Err(e) if sqlstate(&e) == Some("42P01") => return Ok(Checked::Empty),
        Err(e) => return Err(unreachable(e.into())),
    };
    let value = |key: &str| {
        rows.iter()
            .find(|r| r.get::<_, String>(0) == key)
            .map(|r| r.get::<_, String>(1))
    };
    let schema = version_of(value("schema_version").as_deref()).map_err(unreachable)?;
    if schema == 0 {
        return Ok(Checked::Empty);
    }
    if schema > VERSION {
        return Err(LedgerError::NewerSchema {
            path: shown.to_owned(),
            found: schema,
            known: VERSION,
        });
    }
    if value("copy_unfinished").is_some() {
        return Ok(Checked::Unfinished);
    }
    match value("secret_check") {
        Some(kept) if kept != secret_check => Err(LedgerError::OtherSecret {
            path: shown.to_owned(),
        }),
        _ => Ok(Checked::Ready { schema }),
    }
}
