//! The PostgreSQL side of `ledger copy`: a database dumped from one `REPEATABLE READ, READ
//! ONLY` transaction (one snapshot for the whole dump, never a write), and a database loaded
//! one page per durable transaction through the statements `update` and `prune` write with.
//!
//! A database any replica holds a live lease on (by the database's clock) is refused on
//! either side: a copy reads a ledger nobody writes, and fills one nobody serves. It never
//! registers a replica, so copying takes no lease and orphans nothing.

use std::collections::HashMap;

use super::super::Replays;
use super::super::codec;
use super::super::copy::page::{
    BY_REPLICA, CopyError, Entry, Header, LEFT_UNFINISHED, Live, MARKED, Position, UNFINISHED,
    within_page,
};
use super::super::fault::Fault;
use super::connect::{self, Conn, Tx};
use super::{prune, schema, update};
use crate::clock::Timestamp;
use crate::config::PgUrl;
use crate::operation::{Event, StoredResponse};

/// The `meta` key set while a copy fills the database (as for redb).
const COPYING: &str = "copy_unfinished";

/// The source database, inside its snapshot, and where the dump stands.
pub(in crate::ledger) struct Reader {
    name: String,
    tx: Tx,
    at: Position,
}

impl Reader {
    pub(in crate::ledger) async fn open(url: &PgUrl) -> Result<Reader, CopyError> {
        let name = url.to_string();
        let read = |fault: Fault| CopyError::Read {
            ledger: name.clone(),
            reason: fault.to_string(),
        };
        let pool = connect::pool(url, None).map_err(|e| read(Fault::new(e)))?;
        let conn = Conn::get(&pool).await.map_err(read)?;
        let mut tx = conn.begin().await.map_err(read)?;
        tx.batch("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            .await
            .map_err(read)?;
        match look(&tx).await.map_err(read)? {
            Look::NoLedger => return Err(CopyError::Missing { ledger: name }),
            Look::Newer(found) => return Err(read(newer(found))),
            Look::Ledger { live: true, .. } => {
                return Err(CopyError::InUse {
                    ledger: name,
                    by: BY_REPLICA,
                });
            }
            Look::Ledger {
                unfinished: true, ..
            } => return Err(read(Fault::new(UNFINISHED.to_owned()))),
            Look::Ledger { .. } => {}
        }
        Ok(Reader {
            name,
            tx,
            at: Position::Live(None),
        })
    }

    pub(in crate::ledger) async fn header(&self) -> Result<Header, CopyError> {
        let read = async {
            let check = self
                .tx
                .query_opt("SELECT value FROM meta WHERE key = 'secret_check'", &[])
                .await?
                .map(|row| row.get::<_, String>(0));
            let epoch = self
                .tx
                .query_opt(
                    "SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM replica_ids",
                    &[],
                )
                .await?
                .map_or(0, |row| row.get::<_, i64>(0));
            Ok::<_, Fault>(Header {
                secret_check: check,
                epoch: u64::try_from(epoch).unwrap_or_default(),
            })
        };
        read.await.map_err(|fault| self.read_error(fault))
    }

    /// The next up to `max` entries; empty at the end.
    pub(in crate::ledger) async fn page(&mut self, max: usize) -> Result<Vec<Entry>, CopyError> {
        let limit = i64::try_from(max).unwrap_or(i64::MAX);
        loop {
            let (entries, next) = match &self.at {
                Position::Live(after) => self.live_page(after.as_deref(), limit).await,
                Position::Tombs(after) => self.tomb_page(after.as_deref(), limit).await,
                Position::Done => return Ok(Vec::new()),
            }
            .map_err(|fault| self.read_error(fault))?;
            self.at = next;
            if !entries.is_empty() || matches!(self.at, Position::Done) {
                return Ok(entries);
            }
        }
    }

    async fn live_page(
        &self,
        after: Option<&str>,
        limit: i64,
    ) -> Result<(Vec<Entry>, Position), Fault> {
        let rows = self
            .tx
            .query(
                "SELECT o.record, \
                 (COALESCE(octet_length(r.record), 0) + COALESCE(octet_length(q.sealed), 0))::bigint \
                 FROM ops o LEFT JOIN responses r ON r.id = o.id \
                 LEFT JOIN requests q ON q.id = o.id \
                 WHERE $1::text IS NULL OR o.id > $1 ORDER BY o.id LIMIT $2",
                &[&after, &limit],
            )
            .await?;
        let sizes = rows.iter().map(|row| row.get::<_, i64>(1).unsigned_abs());
        let taken = within_page(sizes);
        let ops = rows[..taken]
            .iter()
            .map(|row| codec::decode_op(row.get(0)))
            .collect::<Result<Vec<_>, _>>()?;
        let Some(last) = ops.last().map(|op| op.id.clone()) else {
            return Ok((Vec::new(), Position::Tombs(None)));
        };
        let ids: Vec<&str> = ops.iter().map(|op| op.id.as_str()).collect();
        let mut beside = self.beside(&ids).await?;
        let entries = ops
            .into_iter()
            .map(|op| {
                let kept = beside.remove(op.id.as_str()).unwrap_or_default();
                Entry::Live(Box::new(Live {
                    op,
                    events: kept.events,
                    response: kept.response,
                    request: kept.request,
                    replays: kept.replays,
                }))
            })
            .collect();
        Ok((entries, Position::Live(Some(last))))
    }

    /// What is kept beside each of `ids`: four statements per page, not four per operation.
    async fn beside(&self, ids: &[&str]) -> Result<HashMap<String, Beside>, Fault> {
        let mut out: HashMap<String, Beside> = HashMap::new();
        let sql = "SELECT id, record FROM events WHERE id = ANY($1) ORDER BY id, seq";
        for row in self.tx.query(sql, &[&ids]).await? {
            let event = codec::decode_event(row.get(1))?;
            out.entry(row.get(0)).or_default().events.push(event);
        }
        let sql = "SELECT id, record FROM responses WHERE id = ANY($1)";
        for row in self.tx.query(sql, &[&ids]).await? {
            let response = codec::decode_response(row.get(1))?;
            out.entry(row.get(0)).or_default().response = Some(response);
        }
        let sql = "SELECT id, sealed FROM requests WHERE id = ANY($1)";
        for row in self.tx.query(sql, &[&ids]).await? {
            out.entry(row.get(0)).or_default().request = Some(row.get(1));
        }
        let sql = "SELECT id, count, first_at, last_at FROM replays WHERE id = ANY($1)";
        for row in self.tx.query(sql, &[&ids]).await? {
            let replays = Replays {
                count: u64::try_from(row.get::<_, i64>(1)).unwrap_or_default(),
                first_at: Timestamp(row.get(2)),
                last_at: Timestamp(row.get(3)),
            };
            out.entry(row.get(0)).or_default().replays = Some(replays);
        }
        Ok(out)
    }

    async fn tomb_page(
        &self,
        after: Option<&str>,
        limit: i64,
    ) -> Result<(Vec<Entry>, Position), Fault> {
        let rows = self
            .tx
            .query(
                "SELECT record FROM tombstones WHERE $1::text IS NULL OR id > $1 \
                 ORDER BY id LIMIT $2",
                &[&after, &limit],
            )
            .await?;
        let mut entries = Vec::with_capacity(rows.len());
        for row in &rows {
            let tomb = codec::decode_op(row.get(0))?;
            if tomb.pruned_at.is_none() {
                return Err(Fault::new(format!(
                    "tombstone {} has no pruned_at",
                    tomb.id
                )));
            }
            entries.push(Entry::Tombstone(Box::new(tomb)));
        }
        let next = match entries.last() {
            Some(Entry::Tombstone(tomb)) => Position::Tombs(Some(tomb.id.clone())),
            _ => Position::Done,
        };
        Ok((entries, next))
    }

    fn read_error(&self, fault: Fault) -> CopyError {
        CopyError::Read {
            ledger: self.name.clone(),
            reason: fault.to_string(),
        }
    }
}

/// What is kept beside one live operation.
#[derive(Default)]
struct Beside {
    events: Vec<Event>,
    response: Option<StoredResponse>,
    request: Option<Vec<u8>>,
    replays: Option<Replays>,
}

/// What a database holds, looked at without writing.
enum Look {
    /// No `meta` table, or a schema never completed: no ledger here yet.
    NoLedger,
    /// A schema newer than this binary knows.
    Newer(i64),
    Ledger {
        /// Any operation or tombstone.
        holds: bool,
        /// A replica's lease is live by the database's clock.
        live: bool,
        /// A copy into it began and did not finish.
        unfinished: bool,
    },
}

async fn look(tx: &Tx) -> Result<Look, Fault> {
    let exists = tx
        .query_opt("SELECT to_regclass('meta') IS NOT NULL", &[])
        .await?
        .is_some_and(|row| row.get::<_, bool>(0));
    if !exists {
        return Ok(Look::NoLedger);
    }
    let version = tx
        .query_opt("SELECT value FROM meta WHERE key = 'schema_version'", &[])
        .await?
        .and_then(|row| row.get::<_, String>(0).parse::<i64>().ok())
        .unwrap_or(0);
    if version > schema::VERSION {
        return Ok(Look::Newer(version));
    }
    if version < schema::VERSION {
        return Ok(Look::NoLedger);
    }
    let row = tx
        .query_opt(
            "SELECT EXISTS (SELECT 1 FROM ops) OR EXISTS (SELECT 1 FROM tombstones), \
             EXISTS (SELECT 1 FROM replicas WHERE expires_at > now()), \
             EXISTS (SELECT 1 FROM meta WHERE key = $1)",
            &[&COPYING],
        )
        .await?
        .ok_or_else(|| Fault::new("the look at the ledger returned nothing".into()))?;
    Ok(Look::Ledger {
        holds: row.get(0),
        live: row.get(1),
        unfinished: row.get(2),
    })
}

fn newer(found: i64) -> Fault {
    Fault::new(format!(
        "its schema (version {found}) is newer than this binary knows (version {}); use the \
         idemproxy that wrote it",
        schema::VERSION
    ))
}

/// The destination database.
pub(in crate::ledger) struct Loader {
    name: String,
    pool: deadpool_postgres::Pool,
}

impl Loader {
    /// Checks that the database holds no operation and no tombstone and that no replica
    /// serves it, then creates the schema if it has none; writes nothing else.
    pub(in crate::ledger) async fn open(url: &PgUrl) -> Result<Loader, CopyError> {
        let name = url.to_string();
        let write = |fault: Fault| CopyError::Write {
            ledger: name.clone(),
            reason: fault.to_string(),
            after: "",
        };
        let pool = connect::pool(url, None).map_err(|e| write(Fault::new(e)))?;
        let tx = Conn::get(&pool).await.map_err(write)?.begin().await;
        let tx = tx.map_err(write)?;
        let looked = look(&tx).await;
        tx.rollback().await;
        match looked.map_err(write)? {
            Look::Newer(found) => return Err(write(newer(found))),
            Look::Ledger { live: true, .. } => {
                return Err(CopyError::InUse {
                    ledger: name,
                    by: BY_REPLICA,
                });
            }
            Look::Ledger {
                holds: true,
                unfinished,
                ..
            } => {
                let hint = if unfinished { LEFT_UNFINISHED } else { "" };
                return Err(CopyError::NotEmpty { ledger: name, hint });
            }
            Look::Ledger { .. } => {}
            Look::NoLedger => match schema::prepare(&pool, None).await.map_err(write)? {
                Ok(_) => {}
                Err(found) => return Err(write(newer(found))),
            },
        }
        Ok(Loader { name, pool })
    }

    /// The first commit: the mark of an unfinished copy, the source's secret check value and
    /// a replica sequence past every replica (fence epoch) the source knew.
    pub(in crate::ledger) async fn begin(&self, header: &Header) -> Result<(), CopyError> {
        let check = header.secret_check.clone();
        let epoch = i64::try_from(header.epoch).unwrap_or(i64::MAX);
        let work = async move |tx: &Tx| {
            // The version row's lock orders this against a replica's start (`schema::prepare`):
            // one that started since `open` looked is found here; one after sees the mark.
            tx.query_opt(
                "SELECT 1 FROM meta WHERE key = 'schema_version' FOR UPDATE",
                &[],
            )
            .await?;
            let live = tx
                .query_opt(
                    "SELECT 1 FROM replicas WHERE expires_at > now() LIMIT 1",
                    &[],
                )
                .await?;
            if live.is_some() {
                return Err(Fault::new(format!("it is in use {BY_REPLICA}")));
            }
            tx.execute(
                "INSERT INTO meta (key, value) VALUES ($1, '1') ON CONFLICT (key) DO NOTHING",
                &[&COPYING],
            )
            .await?;
            match &check {
                Some(check) => {
                    tx.execute(
                        "INSERT INTO meta (key, value) VALUES ('secret_check', $1) \
                         ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value",
                        &[check],
                    )
                    .await?
                }
                None => {
                    tx.execute("DELETE FROM meta WHERE key = 'secret_check'", &[])
                        .await?
                }
            };
            if epoch > 0 {
                tx.query_opt(
                    "SELECT setval('replica_ids', GREATEST($1, \
                     (SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM replica_ids)))",
                    &[&epoch],
                )
                .await?;
            }
            Ok(())
        };
        self.write("", work).await
    }

    /// One page, in one transaction.
    pub(in crate::ledger) async fn load(&self, page: Vec<Entry>) -> Result<(), CopyError> {
        let work = async move |tx: &Tx| {
            for entry in page {
                match entry {
                    Entry::Live(live) => load_live(tx, *live).await?,
                    Entry::Tombstone(tomb) => prune::put_tombstone(tx, &tomb).await?,
                }
            }
            Ok(())
        };
        self.write(MARKED, work).await
    }

    /// The last commit: the copy is complete.
    pub(in crate::ledger) async fn finish(&self) -> Result<(), CopyError> {
        let work = async |tx: &Tx| {
            tx.execute("DELETE FROM meta WHERE key = $1", &[&COPYING])
                .await
                .map(drop)
        };
        self.write(MARKED, work).await
    }

    /// Runs `work` in one durable transaction; `after` says what a failure leaves.
    async fn write(
        &self,
        after: &'static str,
        work: impl AsyncFnOnce(&Tx) -> Result<(), Fault>,
    ) -> Result<(), CopyError> {
        let run = async {
            let tx = Conn::get(&self.pool).await?.begin().await?;
            match work(&tx).await {
                Ok(()) => tx.commit(true).await,
                Err(fault) => {
                    tx.rollback().await;
                    Err(fault)
                }
            }
        };
        run.await.map_err(|fault| CopyError::Write {
            ledger: self.name.clone(),
            reason: fault.to_string(),
            after,
        })
    }
}

/// Stores one live operation copied from another ledger, through `update`'s own writes.
async fn load_live(tx: &Tx, live: Live) -> Result<(), Fault> {
    let (write, replays) = live.into_write();
    let id = write.op.id.clone();
    update::apply(tx, &id, None, &write).await?;
    if let Some(r) = replays {
        let count = i64::try_from(r.count).unwrap_or(i64::MAX);
        tx.execute(
            "INSERT INTO replays (id, count, first_at, last_at) VALUES ($1, $2, $3, $4)",
            &[&id, &count, &r.first_at.0, &r.last_at.0],
        )
        .await?;
    }
    Ok(())
}
