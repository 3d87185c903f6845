//! Answers from other threads, handed to the shard that waits for them in bunches.
//!
//! A task on a shard that awaits a oneshot answered from another thread is woken by a
//! remote schedule, and tokio's current-thread runtime writes its event loop's eventfd for
//! every such wake-up: two per fresh operation (its claim and its result, answered by the
//! ledger's syncer), each a system call on the syncer's thread and, when the shard sleeps in
//! `epoll_wait`, a wake-up of the shard. Each shard instead has an inbox. An answer for a
//! task of that shard goes into the inbox, and only the answer that finds it empty wakes the
//! shard; a task on the shard then delivers everything the inbox holds, each answer a wake-up
//! on the same thread (a push onto the shard's own run queue).
//!
//! Nothing is answered earlier or later than before, only through the inbox: whoever hands
//! an answer over has already decided to give it (the syncer, after its sync).

use std::cell::RefCell;
use std::sync::{Arc, Mutex, PoisonError};

use tokio::sync::Notify;

/// An answer to hand over: sends it, on the shard's thread.
pub type Delivery = Box<dyn FnOnce() + Send>;

thread_local! {
    /// The inbox of the shard this thread runs, if it is a shard's thread.
    static HOME: RefCell<Option<Arc<Inbox>>> = const { RefCell::new(None) };
}

/// A shard's inbox.
#[derive(Default)]
pub struct Inbox {
    queue: Mutex<Vec<Delivery>>,
    ready: Notify,
    /// How many bunches the shard has taken, for the tests.
    #[cfg(test)]
    pub(crate) bunches: std::sync::atomic::AtomicUsize,
}

impl Inbox {
    /// Queues `delivery` for the shard's thread; wakes that thread if nothing was queued.
    pub fn deliver(&self, delivery: Delivery) {
        let was_empty = {
            let mut queue = self.queue.lock().unwrap_or_else(PoisonError::into_inner);
            queue.push(delivery);
            queue.len() == 1
        };
        // One wake-up per bunch: a queue that was not empty has one on its way already
        // (`Notify` keeps it as a permit if the delivering task is not waiting yet).
        if was_empty {
            self.ready.notify_one();
        }
    }

    /// Runs on the shard: delivers what the inbox holds, for as long as the shard runs.
    async fn run(self: Arc<Self>) {
        let mut bunch = Vec::new();
        loop {
            self.ready.notified().await;
            std::mem::swap(
                &mut bunch,
                &mut *self.queue.lock().unwrap_or_else(PoisonError::into_inner),
            );
            #[cfg(test)]
            self.bunches
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            for delivery in bunch.drain(..) {
                delivery();
            }
        }
    }
}

/// Makes the calling thread a shard's thread with an inbox, and returns the task that must
/// run on the shard's runtime to empty it.
pub fn install() -> impl Future<Output = ()> + Send + 'static {
    let inbox = Arc::new(Inbox::default());
    HOME.with(|home| *home.borrow_mut() = Some(Arc::clone(&inbox)));
    inbox.run()
}

/// The inbox of the calling thread's shard (`None`: not a shard's thread).
pub fn home() -> Option<Arc<Inbox>> {
    HOME.with(|home| home.borrow().clone())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A shard's runtime on the calling thread, with its inbox installed.
    fn shard() -> (tokio::runtime::Runtime, Arc<Inbox>) {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.spawn(install());
        (runtime, home().expect("installed on this thread"))
    }

    #[test]
    fn answers_from_another_thread_arrive_on_the_shards_thread_in_order() {
        let (runtime, inbox) = shard();
        let here = std::thread::current().id();
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let sender = std::thread::spawn(move || {
            for n in 0..100 {
                let tx = tx.clone();
                inbox.deliver(Box::new(move || {
                    tx.send((n, std::thread::current().id())).unwrap();
                }));
            }
        });
        let got = runtime.block_on(async {
            let mut got = Vec::new();
            while got.len() < 100 {
                got.push(rx.recv().await.unwrap());
            }
            got
        });
        sender.join().unwrap();
        assert!(got.iter().all(|(_, thread)| *thread == here));
        let order: Vec<_> = got.iter().map(|(n, _)| *n).collect();
        assert_eq!(order, (0..100).collect::<Vec<_>>());
        assert!(std::thread::spawn(home).join().unwrap().is_none());
    }

    #[test]
    fn answers_queued_while_the_shard_is_busy_wake_it_once() {
        let (runtime, inbox) = shard();
        // The delivering task waits for its first answer...
        runtime.block_on(async {
            for _ in 0..3 {
                tokio::task::yield_now().await;
            }
        });
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        // ... and the shard is busy (it is not polling its runtime) while fifty arrive: the
        // first wakes it, the others find the inbox not empty, so it runs once.
        let from = Arc::clone(&inbox);
        std::thread::spawn(move || {
            for n in 0..50 {
                let tx = tx.clone();
                from.deliver(Box::new(move || tx.send(n).unwrap()));
            }
        })
        .join()
        .unwrap();
        let got = runtime.block_on(async {
            let mut got = Vec::new();
            while let Some(n) = rx.recv().await {
                got.push(n);
            }
            got
        });
        assert_eq!(got, (0..50).collect::<Vec<_>>());
        assert_eq!(
            inbox.bunches.load(std::sync::atomic::Ordering::Relaxed),
            1,
            "fifty answers, one wake-up"
        );
    }
}
