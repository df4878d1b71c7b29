//! Where the drive loop runs.
//!
//! The loop is one task owning the sans-io host: it gains nothing from a
//! work-stealing scheduler, and it blocks its thread for an in-place commit
//! when it has nothing else to do. So it never shares a multi-threaded
//! runtime's workers:
//!
//! - on a **current-thread** runtime (agentsessionsd's) it is a task beside
//!   the gRPC server: a call, the loop, the in-process harness and the
//!   response frames then meet on one thread, with no cross-thread wake-up
//!   between them (each costs tens of µs on a VM whose other CPU idles);
//! - on a **multi-threaded** runtime it gets a thread of its own with a
//!   current-thread runtime, so its commits never stall a worker that
//!   HTTP/2 connections need, and what it spawns (in-process harness runs,
//!   client watchers, tool calls) runs beside it on that thread.
//!
//! Dropping a [`DriveLoop`] that was not drained stops the loop where it
//! is, as a killed process would: effects in flight are abandoned (a commit
//! already under way finishes) and every task it spawned is dropped. A loop
//! on its own thread also stops when the runtime that started it shuts
//! down, as a task of that runtime would; to stop it before the listener's
//! tasks go (so it never sees their calls end), drop the loop first.

use tokio::runtime::{Handle, RuntimeFlavor};
use tokio::sync::oneshot;

use super::driver::Driver;
use super::start_error::StartError;
use crate::journal::JournalStore;

/// A running drive loop.
pub struct DriveLoop {
    kill: Option<oneshot::Sender<()>>,
    done: Option<oneshot::Receiver<()>>,
    /// Its own thread, when the caller's runtime is multi-threaded.
    thread: Option<std::thread::JoinHandle<()>>,
    /// A task on the caller's runtime whose end (the runtime shutting
    /// down) stops the thread.
    tether: Option<tokio::task::JoinHandle<()>>,
}

impl DriveLoop {
    /// Starts `driver` as described in the module docs. Must be called
    /// from within a tokio runtime.
    pub fn start<S: JournalStore + 'static>(driver: Driver<S>) -> Result<Self, StartError> {
        Self::start_with(driver, false)
    }

    /// Starts `driver` on a thread of its own whatever the caller's
    /// runtime: every loop past the first of a partitioned daemon, so the
    /// loops run on as many cores.
    pub fn start_on_thread<S: JournalStore + 'static>(
        driver: Driver<S>,
    ) -> Result<Self, StartError> {
        Self::start_with(driver, true)
    }

    fn start_with<S: JournalStore + 'static>(
        driver: Driver<S>,
        own_thread: bool,
    ) -> Result<Self, StartError> {
        let (kill, killed) = oneshot::channel::<()>();
        let (finished, done) = oneshot::channel::<()>();
        let (tether_tx, tether_rx) = oneshot::channel::<()>();
        let run = async move {
            tokio::select! {
                biased;
                // Sent by drop, or dropped with the tether task.
                _ = killed => {}
                _ = tether_rx => {}
                () = driver.run() => {}
            }
        };
        let flavor = Handle::current().runtime_flavor();
        let (thread, tether) = match flavor {
            RuntimeFlavor::CurrentThread if !own_thread => {
                tokio::spawn(async move {
                    let _tether = tether_tx;
                    run.await;
                    let _ = finished.send(());
                });
                (None, None)
            }
            _ => {
                let failed = |e: std::io::Error| StartError::Thread(format!("drive loop: {e}"));
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .map_err(failed)?;
                let thread = std::thread::Builder::new()
                    .name("drive-loop".into())
                    .spawn(move || {
                        runtime.block_on(run);
                        // Tasks the loop spawned die with its runtime,
                        // before anyone waiting on the loop hears it ended.
                        drop(runtime);
                        let _ = finished.send(());
                    })
                    .map_err(failed)?;
                let tether = tokio::spawn(async move {
                    let _tether = tether_tx;
                    std::future::pending::<()>().await;
                });
                (Some(thread), Some(tether))
            }
        };
        Ok(Self {
            kill: Some(kill),
            done: Some(done),
            thread,
            tether,
        })
    }

    /// Waits until the loop has returned (after a drain) or died.
    pub async fn finished(&mut self) {
        if let Some(done) = self.done.take() {
            let _ = done.await;
        }
    }
}

impl Drop for DriveLoop {
    fn drop(&mut self) {
        if let Some(kill) = self.kill.take() {
            let _ = kill.send(());
        }
        if let Some(tether) = self.tether.take() {
            tether.abort();
        }
        if let Some(thread) = self.thread.take() {
            // Bounded: the loop stops at its next await, at most one
            // commit away. A panic in the loop was already reported by the
            // panic hook.
            let _ = thread.join();
        }
    }
}
