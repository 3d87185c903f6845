//! The agents' connections are served on shards: one single-threaded tokio runtime per core,
//! each on its own thread, as nginx runs one event loop per worker process.
//!
//! The listener accepts on the main runtime and hands each connection to the next shard in
//! turn; from then on the connection, the tasks its requests spawn and the upstream
//! connections they open (see `upstream::pool`, which keeps each shard's idle connections
//! apart) all run on that shard's thread. A request then wakes no other thread on its way
//! through the proxy, where a work-stealing runtime wakes an idle worker to steal the task
//! the reactor just woke, and an upstream connection's task may run on the other core from
//! the request that waits for it. The ledger's writer keeps its own thread (`ledger::writer`).
//!
//! A shard stops when its `Shards` is dropped or `stop`ped: its runtime is dropped with
//! whatever still runs on it, so the server stops the shards only once its connections have
//! drained (or the grace period is over).

use std::cell::Cell;
use std::io;
use std::thread::JoinHandle;

use tokio::runtime::Handle;
use tokio::sync::oneshot;

/// How long a stopping shard waits for its blocking pool (a ledger read in progress).
const BLOCKING_GRACE: std::time::Duration = std::time::Duration::from_secs(1);

thread_local! {
    /// The shard this thread runs, if it is a shard's thread.
    static INDEX: Cell<Option<usize>> = const { Cell::new(None) };
}

/// The shard the calling thread runs (`None`: not a shard's thread, e.g. the main runtime).
pub fn current() -> Option<usize> {
    INDEX.with(Cell::get)
}

/// The running shards.
pub struct Shards {
    shards: Vec<Shard>,
    next: std::sync::atomic::AtomicUsize,
}

struct Shard {
    handle: Handle,
    stop: Option<oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl Shards {
    /// Starts `count` shards (at least one), each a thread named `idemproxy-shard-N`.
    pub fn start(count: usize) -> io::Result<Shards> {
        let shards = (0..count.max(1))
            .map(Shard::start)
            .collect::<io::Result<Vec<_>>>()?;
        Ok(Shards {
            shards,
            next: std::sync::atomic::AtomicUsize::new(0),
        })
    }

    /// As many shards as the machine has cores for this process.
    pub fn per_core() -> io::Result<Shards> {
        Shards::start(std::thread::available_parallelism().map_or(1, |n| n.get()))
    }

    /// The runtime of the next shard in turn, for a new connection.
    pub fn next(&self) -> &Handle {
        let i = self.next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        &self.shards[i % self.shards.len()].handle
    }

    /// Stops every shard (dropping what still runs on it) and waits for their threads; called
    /// from async code, it waits on the blocking pool.
    pub async fn stop(mut self) {
        let threads = self.signal();
        let _ = tokio::task::spawn_blocking(move || {
            for thread in threads {
                let _ = thread.join();
            }
        })
        .await;
    }

    /// Tells every shard to stop; their threads, to join.
    fn signal(&mut self) -> Vec<JoinHandle<()>> {
        self.shards
            .iter_mut()
            .filter_map(|shard| {
                if let Some(stop) = shard.stop.take() {
                    let _ = stop.send(());
                }
                shard.thread.take()
            })
            .collect()
    }
}

impl Drop for Shards {
    /// Shards not `stop`ped are told to stop; their threads end on their own.
    fn drop(&mut self) {
        self.signal();
    }
}

impl Shard {
    fn start(index: usize) -> io::Result<Shard> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .thread_name("idemproxy-blocking")
            .build()?;
        let handle = runtime.handle().clone();
        let (stop, stopped) = oneshot::channel::<()>();
        let thread = std::thread::Builder::new()
            .name(format!("idemproxy-shard-{index}"))
            .spawn(move || {
                INDEX.with(|i| i.set(Some(index)));
                runtime.spawn(crate::handoff::install());
                // A dropped sender stops the shard too.
                let _ = runtime.block_on(stopped);
                // What still runs is dropped here, on this thread; a read still running on
                // its blocking pool gets a moment to end.
                runtime.shutdown_timeout(BLOCKING_GRACE);
            })?;
        Ok(Shard {
            handle,
            stop: Some(stop),
            thread: Some(thread),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn connections_go_to_each_shard_in_turn_and_run_on_its_thread() {
        let shards = Shards::start(2).unwrap();
        let mut seen = Vec::new();
        for _ in 0..4 {
            let ran = shards.next().spawn(async { current() });
            seen.push(ran.await.unwrap());
        }
        assert_eq!(seen, [Some(0), Some(1), Some(0), Some(1)]);
        assert_eq!(current(), None);
        shards.stop().await;
    }

    #[tokio::test]
    async fn stopping_drops_what_still_runs() {
        let shards = Shards::start(1).unwrap();
        let (tx, rx) = oneshot::channel::<()>();
        shards.next().spawn(async move {
            let _kept = tx;
            std::future::pending::<()>().await;
        });
        shards.stop().await;
        // The task and the sender it held are gone.
        assert!(rx.await.is_err());
    }
}
