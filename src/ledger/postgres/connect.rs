//! Connections to the PostgreSQL ledger: the pool, TLS, and the transaction guard.
//!
//! This file owns how a connection is made (rustls with the bundled web roots for
//! `sslmode=require`/`verify-full`, plain TCP otherwise; the password from the URL or
//! `PGPASSWORD`; `synchronous_commit = on` for every session) and the one rule about broken
//! connections: a transaction that does not end in `commit` or `rollback` discards its
//! connection, so a connection in an unknown state never goes back to the pool. Errors become
//! `Fault`s whose words never hold the password.

use std::sync::Arc;
use std::time::Duration;

use deadpool_postgres::{Manager, ManagerConfig, Object, Pool, RecyclingMethod, Runtime};
use futures_util::future::join;
use tokio::task::JoinHandle;
use tokio_postgres::types::ToSql;
use tokio_postgres::{AsyncMessage, NoTls, Row, Statement};

use super::super::fault::Fault;
use crate::config::{PgUrl, SslMode};

/// Connections one replica keeps open at most.
const POOL_SIZE: usize = 16;
/// How long to wait for a connection (made, or free in the pool) before the ledger is
/// unavailable.
pub(super) const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

impl From<tokio_postgres::Error> for Fault {
    fn from(e: tokio_postgres::Error) -> Fault {
        // A database error's own message says more than "db error".
        match e.as_db_error() {
            Some(db) => Fault::new(format!("PostgreSQL: {}", db.message())),
            None => Fault::new(format!("PostgreSQL: {}", with_causes(&e))),
        }
    }
}

/// `e` followed by each error it wraps (`error connecting to server: Connection refused`):
/// tokio-postgres names the cause only as its source. The causes are I/O, TLS and protocol
/// errors, which never hold the connection's password.
fn with_causes(e: &(dyn std::error::Error + 'static)) -> String {
    let mut words = e.to_string();
    let mut cause = e.source();
    while let Some(inner) = cause {
        let said = inner.to_string();
        if !words.contains(&said) {
            words.push_str(": ");
            words.push_str(&said);
        }
        cause = inner.source();
    }
    words
}

impl From<deadpool_postgres::PoolError> for Fault {
    fn from(e: deadpool_postgres::PoolError) -> Fault {
        match e {
            deadpool_postgres::PoolError::Backend(e) => Fault::from(e),
            other => Fault::new(format!("no connection to PostgreSQL: {other}")),
        }
    }
}

/// The SQLSTATE of a database error, if it was one (for retries at setup).
pub(super) fn sqlstate(e: &tokio_postgres::Error) -> Option<&str> {
    e.code().map(|c| c.code())
}

/// The pool of connections to `url`; connects lazily (the first `get` makes a connection).
/// `stall`: how long a session may hold what it locked while it does nothing (a replica
/// paused inside a transaction, or cut off from the database) before the server ends it and
/// its locks go, and how long a statement waits for a lock; `None` for `ledger copy` and
/// `check`, which hold no lease.
pub(super) fn pool(url: &PgUrl, stall: Option<Duration>) -> Result<Pool, String> {
    let config = config(url, stall)?;
    let recycling = ManagerConfig {
        recycling_method: RecyclingMethod::Fast,
    };
    let manager = match url.ssl() {
        SslMode::Plain => Manager::from_config(config, NoTls, recycling),
        SslMode::Verified => Manager::from_config(config, tls()?, recycling),
    };
    Pool::builder(manager)
        .max_size(POOL_SIZE)
        .runtime(Runtime::Tokio1)
        .wait_timeout(Some(CONNECT_TIMEOUT))
        .create_timeout(Some(CONNECT_TIMEOUT))
        .recycle_timeout(Some(CONNECT_TIMEOUT))
        .build()
        .map_err(|e| format!("{url}: {e}"))
}

/// A connection of its own (not pooled) that listens on `channel`: each notification's
/// payload goes to `heard`, on the task that drives the connection, in the order the server
/// sent them. The connection's task (returned) ends when the connection does. `stall` as for
/// `pool`.
pub(super) async fn listen(
    url: &PgUrl,
    stall: Duration,
    channel: &str,
    heard: impl Fn(&str) + Send + 'static,
) -> Result<(tokio_postgres::Client, JoinHandle<()>), Fault> {
    let config = config(url, Some(stall)).map_err(Fault::new)?;
    let (client, driver) = match url.ssl() {
        SslMode::Plain => {
            let (client, connection) = config.connect(NoTls).await?;
            (client, tokio::spawn(drive(connection, heard)))
        }
        SslMode::Verified => {
            let (client, connection) = config.connect(tls().map_err(Fault::new)?).await?;
            (client, tokio::spawn(drive(connection, heard)))
        }
    };
    if let Err(e) = client.batch_execute(&format!("LISTEN {channel}")).await {
        driver.abort();
        return Err(e.into());
    }
    Ok((client, driver))
}

/// Drives `connection` until it ends, handing each notification's payload to `heard`.
async fn drive<S, T>(mut connection: tokio_postgres::Connection<S, T>, heard: impl Fn(&str))
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
    T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    loop {
        match std::future::poll_fn(|cx| connection.poll_message(cx)).await {
            Some(Ok(AsyncMessage::Notification(note))) => heard(note.payload()),
            Some(Ok(_)) => {}
            Some(Err(_)) | None => return,
        }
    }
}

/// The connection settings of every session of a replica (see `pool`).
fn config(url: &PgUrl, stall: Option<Duration>) -> Result<tokio_postgres::Config, String> {
    let mut config: tokio_postgres::Config = url
        .secret_url()
        .parse()
        .map_err(|e| format!("{url}: {e}"))?;
    if config.get_password().is_none()
        && let Ok(password) = std::env::var("PGPASSWORD")
    {
        config.password(password);
    }
    // Durable commits unless a transaction says otherwise; and no NOTICE in the logs for
    // the `IF NOT EXISTS` of every start.
    let mut session = "-c synchronous_commit=on -c client_min_messages=warning".to_owned();
    if let Some(stall) = stall {
        let ms = stall.as_millis().max(1);
        session.push_str(&format!(
            " -c idle_in_transaction_session_timeout={ms} -c lock_timeout={ms}"
        ));
    }
    let options = match config.get_options() {
        Some(given) => format!("{given} {session}"),
        None => session,
    };
    config.options(&options);
    config.connect_timeout(CONNECT_TIMEOUT);
    // A database that stops answering (a partition) ends the connection within about `stall`
    // (keepalives, and unacknowledged data), not TCP's two hours.
    let probe = stall.unwrap_or(Duration::from_secs(30));
    config.keepalives_idle(probe.max(Duration::from_secs(1)));
    config.keepalives_interval(Duration::from_secs(1));
    config.keepalives_retries(3);
    config.tcp_user_timeout(probe.max(Duration::from_secs(1)));
    if config.get_application_name().is_none() {
        config.application_name("idemproxy");
    }
    Ok(config)
}

fn tls() -> Result<tokio_postgres_rustls::MakeRustlsConnect, String> {
    let mut roots = rustls::RootCertStore::empty();
    roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(tokio_postgres_rustls::MakeRustlsConnect::new(config))
}

/// One pooled connection, for statements outside a transaction.
pub(super) struct Conn(Object);

impl Conn {
    pub(super) async fn get(pool: &Pool) -> Result<Conn, Fault> {
        Ok(Conn(pool.get().await?))
    }

    pub(super) async fn query(
        &self,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Vec<Row>, Fault> {
        let statement = self.0.prepare_cached(sql).await?;
        Ok(self.0.query(&statement, params).await?)
    }

    pub(super) async fn query_opt(
        &self,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Option<Row>, Fault> {
        let statement = self.0.prepare_cached(sql).await?;
        Ok(self.0.query_opt(&statement, params).await?)
    }

    /// Runs `sql` (no parameters) as a simple query; the error stays PostgreSQL's own.
    pub(super) async fn batch(&self, sql: &str) -> Result<(), tokio_postgres::Error> {
        self.0.batch_execute(sql).await
    }

    /// `sql` (no parameters); the error stays PostgreSQL's own.
    pub(super) async fn raw_query(&self, sql: &str) -> Result<Vec<Row>, tokio_postgres::Error> {
        self.0.query(sql, &[]).await
    }

    /// Begins a READ COMMITTED transaction on this connection.
    pub(super) async fn begin(self) -> Result<Tx, Fault> {
        let mut tx = Tx { conn: Some(self.0) };
        tx.batch(BEGIN).await?;
        Ok(tx)
    }

    /// Begins a READ COMMITTED transaction and runs `sql` as its first statement, in one round
    /// trip: the two are sent together (pipelined) and answered in order. `sql` never runs
    /// outside the transaction as far as the caller knows: when `BEGIN` fails, the
    /// transaction is dropped (its connection discarded) and the error returned.
    ///
    /// `WriteFailed::Statement` when the database refused `sql` (its own error, with a
    /// SQLSTATE); `Before` for any other failure.
    pub(super) async fn begin_with(
        self,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<(Tx, Vec<Row>), WriteFailed> {
        let tx = Tx { conn: Some(self.0) };
        let rows = {
            let (client, statement) = tx.prepared(sql).await?;
            // `join` polls `BEGIN` first, so it is sent first.
            let (began, rows) = join(
                client.batch_execute(BEGIN),
                client.query(&statement, params),
            )
            .await;
            began.map_err(|e| WriteFailed::Before(e.into()))?;
            rows.map_err(|e| match e.as_db_error() {
                Some(_) => WriteFailed::Statement(e),
                None => WriteFailed::Before(e.into()),
            })?
        };
        Ok((tx, rows))
    }
}

const BEGIN: &str = "BEGIN ISOLATION LEVEL READ COMMITTED";

/// How `Tx::execute_and_commit` failed.
pub(super) enum WriteFailed {
    /// Nothing was sent: nothing was written.
    Before(Fault),
    /// The database refused the statement (its own error, with a SQLSTATE): nothing was
    /// written.
    Statement(tokio_postgres::Error),
    /// The statement ran and the commit failed or went unanswered, or the connection failed
    /// under either: it may have taken effect.
    Commit(Fault),
}

impl WriteFailed {
    pub(super) fn into_fault(self) -> Fault {
        match self {
            WriteFailed::Before(fault) | WriteFailed::Commit(fault) => fault,
            WriteFailed::Statement(e) => e.into(),
        }
    }
}

/// An open transaction. Dropped without `commit` or `rollback` (an error, a timeout, a panic),
/// it takes its connection out of the pool and closes it: the server rolls it back.
pub(super) struct Tx {
    conn: Option<Object>,
}

impl Tx {
    fn client(&self) -> Result<&Object, Fault> {
        self.conn
            .as_ref()
            .ok_or_else(|| Fault::new("the transaction has ended".to_owned()))
    }

    /// This transaction's connection with `sql` prepared on it (cached per connection), for
    /// statements sent together with another: nothing has been sent for them yet.
    async fn prepared(&self, sql: &str) -> Result<(&Object, Statement), WriteFailed> {
        let client = self.client().map_err(WriteFailed::Before)?;
        let statement = client
            .prepare_cached(sql)
            .await
            .map_err(|e| WriteFailed::Before(e.into()))?;
        Ok((client, statement))
    }

    pub(super) async fn batch(&mut self, sql: &str) -> Result<(), Fault> {
        Ok(self.client()?.batch_execute(sql).await?)
    }

    pub(super) async fn query(
        &self,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Vec<Row>, Fault> {
        let client = self.client()?;
        let statement = client.prepare_cached(sql).await?;
        Ok(client.query(&statement, params).await?)
    }

    pub(super) async fn query_opt(
        &self,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Option<Row>, Fault> {
        let client = self.client()?;
        let statement = client.prepare_cached(sql).await?;
        Ok(client.query_opt(&statement, params).await?)
    }

    pub(super) async fn execute(
        &self,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<u64, Fault> {
        let client = self.client()?;
        let statement = client.prepare_cached(sql).await?;
        Ok(client.execute(&statement, params).await?)
    }

    /// Takes the row lock that serializes every read-decide-write of `id` across replicas,
    /// whether or not anything is stored under `id` yet.
    pub(super) async fn lock(&self, id: &str) -> Result<(), Fault> {
        self.execute(
            "INSERT INTO op_locks (id) VALUES ($1) \
             ON CONFLICT (id) DO UPDATE SET id = EXCLUDED.id",
            &[&id],
        )
        .await
        .map(drop)
    }

    /// Runs `sql` and then commits, in one round trip (pipelined). `Ok` only when both did:
    /// the commit took effect. When `sql` fails, the server ends the transaction without
    /// effect at the `COMMIT`; the error is `sql`'s and nothing was written. When `sql`
    /// succeeds and the commit fails, whether it took effect is unknown (as for `commit`).
    /// The connection goes back to the pool only after a commit that was answered.
    pub(super) async fn execute_and_commit(
        mut self,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<(), WriteFailed> {
        {
            let (client, statement) = self.prepared(sql).await?;
            let (done, committed) = join(
                client.execute(&statement, params),
                client.batch_execute("COMMIT"),
            )
            .await;
            match done {
                Ok(_) => {}
                // The database refused it: the transaction is aborted, and the `COMMIT` ends
                // it without effect.
                Err(e) if e.as_db_error().is_some() => return Err(WriteFailed::Statement(e)),
                // The connection failed: the server may have run both.
                Err(e) => return Err(WriteFailed::Commit(e.into())),
            }
            committed.map_err(|e| WriteFailed::Commit(e.into()))?;
        }
        self.release();
        Ok(())
    }

    /// Commits: durably (`synchronous_commit = on`, the session's setting), or, for a
    /// transaction that only appended history, without waiting for the flush.
    pub(super) async fn commit(mut self, durable: bool) -> Result<(), Fault> {
        let sql = if durable {
            "COMMIT"
        } else {
            "SET LOCAL synchronous_commit = off; COMMIT"
        };
        self.batch(sql).await?;
        self.release();
        Ok(())
    }

    /// Rolls back and keeps the connection; a failed rollback discards it.
    pub(super) async fn rollback(mut self) {
        if self.batch("ROLLBACK").await.is_ok() {
            self.release();
        }
    }

    /// Hands the connection back to the pool (the transaction has ended cleanly).
    fn release(&mut self) {
        drop(self.conn.take());
    }
}

impl Drop for Tx {
    fn drop(&mut self) {
        if let Some(conn) = self.conn.take() {
            drop(Object::take(conn));
        }
    }
}
