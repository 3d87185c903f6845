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

/// The SQLSTATE `idemproxy_write_v1` raises when a new claim finds this replica's lease
/// lapsed.
pub(super) const LEASE_LAPSED: &str = "IP001";

/// The channel on which a change to a final operation (`succeeded`, `failed`) is announced to
/// every replica: the payload is its ID, or `*` for "forget everything" (a prune).
pub(super) const CHANGED: &str = "idemproxy_changed";

/// The server-side halves of a batch of `update`s (`group`), installed (replaced) at every
/// start under the version row's lock, so a database an older build created gains them.
/// Their names carry a version: a change to what one takes or does is a new name, so
/// replicas of two builds can share one database while a rolling restart runs.
///
/// `idemproxy_read_v1` takes the lock rows of `p_ids` (distinct, in the order given: sorted,
/// so two batches never wait for each other in a circle) and then reads each (a statement of
/// its own, so its snapshot sees what each lock's previous holder committed): the record,
/// whether it is `in_flight` under a lapsed owner, and the tombstone when nothing is live.
///
/// `idemproxy_write_v1` applies the batch's writes in order, entry `i` being `p_ids[i]` with
/// its record (null when the operation is unchanged), index columns, the events
/// `p_events[p_ev_ends[i-1]+1 .. p_ev_ends[i]]`, its response (or null), its kept request
/// (`p_requests[i]`: 0 keep, 1 store `p_sealed[i]`, 2 erase), whether it is a new claim and
/// whether a change to a final operation is announced; then removes the lock rows `p_unlock`
/// (IDs that hold nothing); refuses the whole batch if it holds a new claim and this
/// replica's lease is not live by the database's clock (`LEASE_LAPSED`); and makes the
/// commit asynchronous when nothing durable changed (`p_durable` false and no kept request
/// erased).
const FUNCTIONS: &str = r#"
DROP INDEX IF EXISTS ops_by_provider;
DROP INDEX IF EXISTS ops_by_route;

CREATE OR REPLACE FUNCTION idemproxy_read_v1(p_ids text[], p_me bigint)
RETURNS TABLE (op_id text, op_record bytea, op_lapsed boolean, op_tomb bytea)
LANGUAGE plpgsql VOLATILE AS $f$
BEGIN
    INSERT INTO op_locks (id) SELECT k FROM unnest(p_ids) WITH ORDINALITY AS u (k, n) ORDER BY n
        ON CONFLICT (id) DO UPDATE SET id = EXCLUDED.id;
    RETURN QUERY
    SELECT u.k, o.record,
        COALESCE(o.state = 'in_flight' AND o.owner <> p_me AND NOT EXISTS
            (SELECT 1 FROM replicas r WHERE r.id = o.owner AND r.expires_at > now()), false),
        t.record
    FROM unnest(p_ids) AS u (k)
    LEFT JOIN ops o ON o.id = u.k
    LEFT JOIN tombstones t ON t.id = u.k AND o.id IS NULL;
END
$f$;

CREATE OR REPLACE FUNCTION idemproxy_write_v1(p_me bigint, p_ids text[], p_records bytea[],
    p_states text[], p_providers text[], p_routes text[], p_created bigint[],
    p_updated bigint[], p_fences bigint[], p_ev_ends integer[], p_events bytea[],
    p_responses bytea[], p_requests smallint[], p_sealed bytea[], p_claims boolean[],
    p_notify boolean[], p_unlock text[], p_durable boolean)
RETURNS void LANGUAGE plpgsql VOLATILE AS $f$
DECLARE
    durable boolean := p_durable;
    claims boolean := false;
    ev_from integer := 1;
BEGIN
    FOR i IN 1 .. COALESCE(array_length(p_ids, 1), 0) LOOP
        IF p_records[i] IS NOT NULL THEN
            INSERT INTO ops (id, state, provider, route, created_at, updated_at, fence, owner,
                record)
            VALUES (p_ids[i], p_states[i], p_providers[i], p_routes[i], p_created[i],
                p_updated[i], p_fences[i], p_fences[i] >> 32, p_records[i])
            ON CONFLICT (id) DO UPDATE SET state = EXCLUDED.state,
                provider = EXCLUDED.provider, route = EXCLUDED.route,
                created_at = EXCLUDED.created_at, updated_at = EXCLUDED.updated_at,
                fence = EXCLUDED.fence, owner = EXCLUDED.owner, record = EXCLUDED.record;
        END IF;
        IF p_ev_ends[i] >= ev_from THEN
            INSERT INTO events (id, seq, record)
            SELECT p_ids[i],
                COALESCE((SELECT MAX(seq) FROM events WHERE id = p_ids[i]), -1) + t.ord, t.rec
            FROM unnest(p_events[ev_from:p_ev_ends[i]]) WITH ORDINALITY AS t (rec, ord);
        END IF;
        ev_from := p_ev_ends[i] + 1;
        IF p_responses[i] IS NOT NULL THEN
            INSERT INTO responses (id, record) VALUES (p_ids[i], p_responses[i])
            ON CONFLICT (id) DO UPDATE SET record = EXCLUDED.record;
        END IF;
        IF p_requests[i] = 1 THEN
            INSERT INTO requests (id, sealed) VALUES (p_ids[i], p_sealed[i])
            ON CONFLICT (id) DO UPDATE SET sealed = EXCLUDED.sealed;
        ELSIF p_requests[i] = 2 THEN
            DELETE FROM requests WHERE id = p_ids[i];
            IF FOUND THEN
                durable := true;
            END IF;
        END IF;
        IF p_claims[i] THEN
            claims := true;
        END IF;
        IF p_notify[i] THEN
            PERFORM pg_notify('idemproxy_changed',
                CASE WHEN octet_length(p_ids[i]) <= 7000 THEN p_ids[i] ELSE '*' END);
        END IF;
    END LOOP;
    IF cardinality(p_unlock) > 0 THEN
        DELETE FROM op_locks WHERE id = ANY (p_unlock);
    END IF;
    IF claims AND NOT EXISTS
        (SELECT 1 FROM replicas WHERE id = p_me AND expires_at > clock_timestamp()) THEN
        RAISE EXCEPTION 'this replica''s lease lapsed' USING ERRCODE = 'IP001';
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
