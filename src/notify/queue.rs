//! The bounded queue between the events and the webhook: pushing never waits; when it is
//! full the oldest notification is dropped (and counted), so a webhook that is down or slow
//! costs memory bounded by `[notify] queue`, never a request's time.

use std::collections::VecDeque;
use std::sync::{Mutex, PoisonError};

use tokio::sync::Notify;

use super::message::Notice;

/// Notifications waiting to be sent, oldest first.
pub struct Queue {
    waiting: Mutex<VecDeque<Notice>>,
    capacity: usize,
    ready: Notify,
}

impl Queue {
    pub fn new(capacity: usize) -> Queue {
        Queue {
            waiting: Mutex::new(VecDeque::new()),
            capacity: capacity.max(1),
            ready: Notify::new(),
        }
    }

    /// Queues `notice`; returns how many older ones were dropped to make room (0 or 1).
    pub fn push(&self, notice: Notice) -> u64 {
        let mut waiting = self.waiting.lock().unwrap_or_else(PoisonError::into_inner);
        let mut dropped = 0;
        while waiting.len() >= self.capacity {
            waiting.pop_front();
            dropped += 1;
        }
        waiting.push_back(notice);
        drop(waiting);
        self.ready.notify_one();
        dropped
    }

    /// The oldest notification, waiting for one if there is none. One consumer only.
    pub async fn pop(&self) -> Notice {
        loop {
            if let Some(notice) = self.try_pop() {
                return notice;
            }
            // A push since `try_pop` left a permit, so this cannot miss it.
            self.ready.notified().await;
        }
    }

    fn try_pop(&self) -> Option<Notice> {
        let mut waiting = self.waiting.lock().unwrap_or_else(PoisonError::into_inner);
        waiting.pop_front()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::Timestamp;

    fn notice(detail: &str) -> Notice {
        Notice {
            event: "summary",
            operation_id: None,
            provider: None,
            route: None,
            state: None,
            at: Timestamp(0),
            detail: detail.into(),
            waiting: None,
        }
    }

    #[tokio::test]
    async fn a_full_queue_drops_the_oldest() {
        let queue = Queue::new(2);
        assert_eq!(queue.push(notice("a")), 0);
        assert_eq!(queue.push(notice("b")), 0);
        assert_eq!(queue.push(notice("c")), 1);
        assert_eq!(queue.pop().await.detail, "b");
        assert_eq!(queue.pop().await.detail, "c");
        assert_eq!(queue.try_pop(), None);
    }

    #[tokio::test]
    async fn pop_waits_for_a_push() {
        let queue = std::sync::Arc::new(Queue::new(4));
        let waiter = tokio::spawn({
            let queue = queue.clone();
            async move { queue.pop().await.detail }
        });
        queue.push(notice("late"));
        assert_eq!(waiter.await.unwrap(), "late");
    }
}
