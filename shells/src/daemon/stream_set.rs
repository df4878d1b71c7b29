//! Keyed streams polled only when woken.
//!
//! The drive loop reads the events of every open harness connection and
//! the chunks of every model call in flight. A map that polls each of its
//! streams whenever it is polled (as `tokio_stream::StreamMap` does) costs
//! every input of the loop one poll per open stream: at 64 concurrent
//! turns, a turn's ~20 inputs made ~1 300 polls of connections that had
//! nothing to say. Here every stream gets a waker of its own that queues
//! its key; a poll of the set polls only queued streams.
//!
//! Invariants: a key is queued at most once at a time (its `queued` flag);
//! a stream is polled only through its own waker's context, so whatever
//! wakes it queues it again; a stream that yields an item is queued again
//! (it may hold more), one that ends is removed.

use std::collections::{BTreeMap, VecDeque};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Wake, Waker};

use futures_util::task::AtomicWaker;
use tokio_stream::Stream;

/// See the module docs.
pub struct StreamSet<K, S> {
    entries: BTreeMap<K, Entry<K, S>>,
    ready: Arc<Ready<K>>,
}

struct Entry<K, S> {
    stream: S,
    waker: Arc<KeyWaker<K>>,
    /// The same waker as a `Waker`, made once.
    as_waker: Waker,
}

/// The keys whose streams were woken, and the task polling the set.
struct Ready<K> {
    queue: Mutex<VecDeque<Arc<KeyWaker<K>>>>,
    parent: AtomicWaker,
}

struct KeyWaker<K> {
    key: K,
    queued: AtomicBool,
    ready: std::sync::Weak<Ready<K>>,
}

impl<K: Send + Sync + 'static> Wake for KeyWaker<K> {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        // The set may be gone (its streams outlive it only briefly).
        let Some(ready) = self.ready.upgrade() else {
            return;
        };
        if !self.queued.swap(true, Ordering::AcqRel) {
            ready.push(Arc::clone(self));
            ready.parent.wake();
        }
    }
}

impl<K> Ready<K> {
    fn push(&self, key: Arc<KeyWaker<K>>) {
        // A panic while holding this lock leaves a valid queue.
        self.queue
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push_back(key);
    }

    fn len(&self) -> usize {
        self.queue.lock().unwrap_or_else(|p| p.into_inner()).len()
    }

    fn pop(&self) -> Option<Arc<KeyWaker<K>>> {
        self.queue
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .pop_front()
    }
}

impl<K, S> Default for StreamSet<K, S> {
    fn default() -> Self {
        Self {
            entries: BTreeMap::new(),
            ready: Arc::new(Ready {
                queue: Mutex::new(VecDeque::new()),
                parent: AtomicWaker::new(),
            }),
        }
    }
}

impl<K, S> StreamSet<K, S>
where
    K: Ord + Clone + Send + Sync + 'static,
    S: Stream + Unpin,
{
    /// Adds `stream` under `key` (replacing any stream it had), queued for
    /// its first poll.
    pub fn insert(&mut self, key: K, stream: S) {
        let waker = Arc::new(KeyWaker {
            key: key.clone(),
            queued: AtomicBool::new(false),
            ready: Arc::downgrade(&self.ready),
        });
        let as_waker = Waker::from(Arc::clone(&waker));
        waker.wake_by_ref();
        self.entries.insert(
            key,
            Entry {
                stream,
                waker,
                as_waker,
            },
        );
        debug_assert!(
            self.entries.len() <= 1 << 20,
            "streams are bounded by the host"
        );
    }

    /// Drops the stream under `key`; true if there was one.
    pub fn remove(&mut self, key: &K) -> bool {
        // A key still queued is skipped when it comes up.
        self.entries.remove(key).is_some()
    }

    /// Streams held.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True when no stream is held.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The next item of any woken stream, with its key.
    pub fn poll_next_keyed(&mut self, cx: &mut Context<'_>) -> Poll<Option<(K, S::Item)>> {
        // Registered first, so a wake after the queue is seen empty still
        // reaches this task.
        self.ready.parent.register(cx.waker());
        // Only what was queued on entry: a stream that wakes itself while
        // it is polled (tokio's cooperative budget does) must wait for the
        // next poll, or this loop would never end.
        let mut budget = self.ready.len();
        while budget > 0
            && let Some(woken) = self.ready.pop()
        {
            budget -= 1;
            woken.queued.store(false, Ordering::Release);
            let Some(entry) = self.entries.get_mut(&woken.key) else {
                continue; // removed since it was woken
            };
            if !Arc::ptr_eq(&entry.waker, &woken) {
                continue; // a stream since replaced under the same key
            }
            let mut own = Context::from_waker(&entry.as_waker);
            match Pin::new(&mut entry.stream).poll_next(&mut own) {
                Poll::Ready(Some(item)) => {
                    // It may hold more without waking again.
                    entry.as_waker.wake_by_ref();
                    return Poll::Ready(Some((woken.key.clone(), item)));
                }
                Poll::Ready(None) => {
                    self.entries.remove(&woken.key);
                }
                Poll::Pending => {}
            }
        }
        if self.entries.is_empty() {
            Poll::Ready(None)
        } else {
            Poll::Pending
        }
    }

    /// [`Self::poll_next_keyed`] as a future.
    pub fn next(&mut self) -> impl Future<Output = Option<(K, S::Item)>> + '_ {
        std::future::poll_fn(move |cx| self.poll_next_keyed(cx))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;
    use tokio::sync::mpsc;
    use tokio_stream::wrappers::UnboundedReceiverStream;

    /// A stream that counts its polls.
    struct Counted {
        inner: UnboundedReceiverStream<u32>,
        polls: Arc<AtomicUsize>,
    }

    impl Stream for Counted {
        type Item = u32;
        fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<u32>> {
            self.polls.fetch_add(1, Ordering::Relaxed);
            Pin::new(&mut self.inner).poll_next(cx)
        }
    }

    fn counted(
        set: &mut StreamSet<u32, Counted>,
        key: u32,
    ) -> (mpsc::UnboundedSender<u32>, Arc<AtomicUsize>) {
        let (tx, rx) = mpsc::unbounded_channel();
        let polls = Arc::new(AtomicUsize::new(0));
        set.insert(
            key,
            Counted {
                inner: UnboundedReceiverStream::new(rx),
                polls: polls.clone(),
            },
        );
        (tx, polls)
    }

    fn poll(set: &mut StreamSet<u32, Counted>) -> Poll<Option<(u32, u32)>> {
        set.poll_next_keyed(&mut Context::from_waker(Waker::noop()))
    }

    #[test]
    fn only_the_stream_that_was_woken_is_polled() {
        let mut set = StreamSet::default();
        let streams: Vec<_> = (0..64).map(|k| counted(&mut set, k)).collect();
        // Each is polled once, to register its waker.
        assert_eq!(poll(&mut set), Poll::Pending);
        assert!(streams.iter().all(|(_, p)| p.load(Ordering::Relaxed) == 1));

        streams[7].0.send(70).unwrap();
        assert_eq!(poll(&mut set), Poll::Ready(Some((7, 70))));
        assert_eq!(poll(&mut set), Poll::Pending);
        let polls: Vec<usize> = streams
            .iter()
            .map(|(_, p)| p.load(Ordering::Relaxed))
            .collect();
        assert_eq!(polls[7], 3, "polled for its item and once more after it");
        assert_eq!(polls.iter().sum::<usize>(), 64 + 2);
    }

    #[test]
    fn items_queued_together_all_come_out_and_streams_take_turns() {
        let mut set = StreamSet::default();
        let (a, _) = counted(&mut set, 1);
        let (b, _) = counted(&mut set, 2);
        assert_eq!(poll(&mut set), Poll::Pending);
        for i in 0..3 {
            a.send(10 + i).unwrap();
            b.send(20 + i).unwrap();
        }
        let mut got = Vec::new();
        while let Poll::Ready(Some(item)) = poll(&mut set) {
            got.push(item);
        }
        assert_eq!(
            got,
            [(1, 10), (2, 20), (1, 11), (2, 21), (1, 12), (2, 22)],
            "round robin between ready streams"
        );
    }

    #[test]
    fn an_ended_stream_is_dropped_and_a_removed_one_is_never_polled_again() {
        let mut set = StreamSet::default();
        let (a, _) = counted(&mut set, 1);
        let (b, b_polls) = counted(&mut set, 2);
        assert_eq!(poll(&mut set), Poll::Pending);
        drop(a);
        assert_eq!(poll(&mut set), Poll::Pending);
        assert_eq!(set.len(), 1, "the ended stream is gone");

        b.send(5).unwrap();
        assert!(set.remove(&2));
        let before = b_polls.load(Ordering::Relaxed);
        assert_eq!(poll(&mut set), Poll::Ready(None), "nothing left");
        assert_eq!(b_polls.load(Ordering::Relaxed), before);
    }

    #[test]
    fn a_replaced_stream_does_not_answer_for_its_successor() {
        let mut set = StreamSet::default();
        let (_old, old_polls) = counted(&mut set, 1);
        // Replaced while its first poll is still queued.
        let (new, new_polls) = counted(&mut set, 1);
        new.send(2).unwrap();
        assert_eq!(poll(&mut set), Poll::Ready(Some((1, 2))));
        assert_eq!(poll(&mut set), Poll::Pending);
        assert_eq!(old_polls.load(Ordering::Relaxed), 0);
        assert_eq!(new_polls.load(Ordering::Relaxed), 2);
    }

    #[test]
    fn a_stream_that_wakes_itself_is_polled_once_per_poll_of_the_set() {
        struct Restless(Arc<AtomicUsize>);
        impl Stream for Restless {
            type Item = u32;
            fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<u32>> {
                self.0.fetch_add(1, Ordering::Relaxed);
                cx.waker().wake_by_ref();
                Poll::Pending
            }
        }
        let polls = Arc::new(AtomicUsize::new(0));
        let mut set = StreamSet::default();
        set.insert(1u32, Restless(polls.clone()));
        let noop = &mut Context::from_waker(Waker::noop());
        for n in 1..=3 {
            assert_eq!(set.poll_next_keyed(noop), Poll::Pending);
            assert_eq!(polls.load(Ordering::Relaxed), n);
        }
    }

    #[tokio::test]
    async fn a_wake_from_another_thread_reaches_the_polling_task() {
        let mut set = StreamSet::default();
        let (tx, _) = counted(&mut set, 9);
        let sender = std::thread::spawn(move || {
            std::thread::sleep(std::time::Duration::from_millis(20));
            tx.send(99).unwrap();
        });
        assert_eq!(set.next().await, Some((9, 99)));
        sender.join().unwrap();
    }
}
