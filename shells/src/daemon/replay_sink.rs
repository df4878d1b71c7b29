//! A Replay's frames on their way to the client, and how many the client
//! has not taken yet.
//!
//! Invariant: `queued` counts the records sent and not yet received, so
//! when it is zero the client has taken every record streamed so far; a
//! paced read (the machine's `Pace`) waits for that before it reads the
//! next page, so a reader however slow holds at most one page in the
//! daemon. A receiver that is gone counts as drained (nothing will take
//! the records; the call is being canceled).
//!
//! The channel itself is unbounded so the drive loop never waits on a
//! client: what bounds it is the pacing, one page at a time.

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::task::{Context, Poll};

use agentsessions_machine::vocab::Status;
use agentsessions_proto::v1::LogRecord;
use tokio::sync::{Notify, mpsc};
use tokio_stream::Stream;

type Frame = Result<LogRecord, Status>;

#[derive(Debug, Default)]
struct Backlog {
    queued: AtomicUsize,
    gone: AtomicBool,
    drained: Notify,
}

impl Backlog {
    fn settled(&self) -> bool {
        self.gone.load(Ordering::Acquire) || self.queued.load(Ordering::Acquire) == 0
    }
}

/// The drive loop's end.
#[derive(Debug, Clone)]
pub struct ReplaySink {
    tx: mpsc::UnboundedSender<Frame>,
    backlog: Arc<Backlog>,
}

/// The client's end: a stream of records, then at most one error.
#[derive(Debug)]
pub struct ReplayReceiver {
    rx: mpsc::UnboundedReceiver<Frame>,
    backlog: Arc<Backlog>,
}

/// A connected pair.
pub fn channel() -> (ReplaySink, ReplayReceiver) {
    let (tx, rx) = mpsc::unbounded_channel();
    let backlog = Arc::new(Backlog::default());
    let sink = ReplaySink {
        tx,
        backlog: backlog.clone(),
    };
    (sink, ReplayReceiver { rx, backlog })
}

impl ReplaySink {
    /// Queues one record.
    pub fn record(&self, record: LogRecord) {
        self.backlog.queued.fetch_add(1, Ordering::AcqRel);
        if self.tx.send(Ok(record)).is_err() {
            // Never received: take it back off the count.
            self.backlog.queued.fetch_sub(1, Ordering::AcqRel);
        }
    }

    /// Ends the stream with `status`.
    pub fn fail(&self, status: Status) {
        let _ = self.tx.send(Err(status));
    }

    /// Resolves once the client has taken every record queued so far, or
    /// is gone.
    pub fn drained(&self) -> impl Future<Output = ()> + Send + 'static {
        let backlog = self.backlog.clone();
        async move {
            loop {
                let notified = backlog.drained.notified();
                tokio::pin!(notified);
                // Registered before the check, so a wake between the two
                // is not lost.
                notified.as_mut().enable();
                if backlog.settled() {
                    return;
                }
                notified.await;
            }
        }
    }

    /// Resolves when the client's end is dropped.
    pub async fn closed(&self) {
        self.tx.closed().await;
    }

    /// Records sent and not yet taken (for tests).
    pub fn queued(&self) -> usize {
        self.backlog.queued.load(Ordering::Acquire)
    }
}

impl ReplayReceiver {
    /// The next frame; `None` once the stream is over.
    pub async fn recv(&mut self) -> Option<Frame> {
        std::future::poll_fn(|cx| self.poll_frame(cx)).await
    }

    fn poll_frame(&mut self, cx: &mut Context<'_>) -> Poll<Option<Frame>> {
        let frame = std::task::ready!(self.rx.poll_recv(cx));
        if let Some(Ok(_)) = &frame {
            let before = self.backlog.queued.fetch_sub(1, Ordering::AcqRel);
            assert!(before >= 1, "a received record was counted when sent");
            if before == 1 {
                self.backlog.drained.notify_waiters();
            }
        }
        Poll::Ready(frame)
    }
}

impl Stream for ReplayReceiver {
    type Item = Frame;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Frame>> {
        self.get_mut().poll_frame(cx)
    }
}

impl Drop for ReplayReceiver {
    fn drop(&mut self) {
        self.backlog.gone.store(true, Ordering::Release);
        self.backlog.drained.notify_waiters();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn record(seq: i64) -> LogRecord {
        LogRecord {
            seq,
            ..Default::default()
        }
    }

    #[tokio::test]
    async fn drained_waits_until_the_client_has_taken_every_record() {
        let (sink, mut rx) = channel();
        sink.record(record(1));
        sink.record(record(2));
        let waiting = tokio::spawn(sink.drained());
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(!waiting.is_finished(), "two records are still queued");
        assert_eq!(rx.recv().await.unwrap().unwrap().seq, 1);
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(!waiting.is_finished(), "one record is still queued");
        assert_eq!(rx.recv().await.unwrap().unwrap().seq, 2);
        tokio::time::timeout(Duration::from_secs(5), waiting)
            .await
            .expect("drained once both were taken")
            .unwrap();
        assert_eq!(sink.queued(), 0);
    }

    #[tokio::test]
    async fn a_client_that_is_gone_counts_as_drained() {
        let (sink, rx) = channel();
        sink.record(record(1));
        let waiting = tokio::spawn(sink.drained());
        drop(rx);
        tokio::time::timeout(Duration::from_secs(5), waiting)
            .await
            .expect("a dropped receiver releases the wait")
            .unwrap();
    }

    #[tokio::test]
    async fn an_error_is_not_a_queued_record() {
        let (sink, mut rx) = channel();
        sink.fail(Status::internal("boom"));
        sink.drained().await;
        assert!(rx.recv().await.unwrap().is_err());
    }
}
