//! Start-frame benchmark (`cargo bench -p agentsessions-shells --bench start_frame`).
//!
//! What a remote harness's Start costs the host to put on the wire, at
//! 10 and at 10,000 prior records, two ways measured in one run: the
//! history copied into an owned frame and prost-encoded (the baseline:
//! what the host did before), and [`Outbound::encode_wire`], which writes
//! it from the shared journal records. Allocations are counted by a
//! wrapper around the system allocator.

// The counting allocator is the one unsafe item: it forwards to `System`.
#![allow(unsafe_code)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use agentsessions_machine::events;
use agentsessions_proto::v1::controller_frame::Frame;
use agentsessions_proto::v1::{ControllerFrame, Event, Start};
use agentsessions_shells::harness::{History, Outbound};
use prost::Message as _;

struct Counting;

static ALLOCS: AtomicU64 = AtomicU64::new(0);

// SAFETY: every method forwards its arguments unchanged to `System`, which
// upholds the `GlobalAlloc` contract; the counter is a plain atomic.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: same layout, forwarded.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from `System.alloc` with this layout.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: forwarded unchanged.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

/// An echo turn's four records, `n / 4` times over.
fn history(n: usize) -> History {
    History::from_events((0..n).map(|i| -> Event {
        let exec = format!("exec-{:08}", i / 4);
        match i % 4 {
            0 => events::input(&exec, events::text_message("user", "hello")),
            1 | 2 => events::output(&exec, events::assistant_text(&format!("echo:hello {i}"))),
            _ => events::end_completed(&exec),
        }
    }))
}

fn start(history: &History) -> Outbound {
    Outbound {
        frame: ControllerFrame {
            session: "session-0001".into(),
            execution_id: "exec-next".into(),
            frame: Some(Frame::Start(Start {
                inputs: vec![events::text_message("user", "hello")],
                ..Start::default()
            })),
        },
        history: Some(history.clone()),
    }
}

/// Mean µs and allocations per Start sent `reps` times the given way; the
/// buffer is reused, as tonic's encode buffer is.
fn measure(history: &History, reps: usize, direct: bool) -> (f64, f64) {
    let mut buf = Vec::with_capacity(1 << 20);
    let allocs = ALLOCS.load(Ordering::Relaxed);
    let t = Instant::now();
    for _ in 0..reps {
        buf.clear();
        let outbound = start(history);
        if direct {
            outbound.encode_wire(&mut buf).unwrap();
        } else {
            outbound.into_wire().encode(&mut buf).unwrap();
        }
        std::hint::black_box(&buf);
    }
    let us = t.elapsed().as_secs_f64() * 1e6 / reps as f64;
    let allocs = (ALLOCS.load(Ordering::Relaxed) - allocs) as f64 / reps as f64;
    (us, allocs)
}

fn main() {
    println!("# Start frame to a remote harness: history copied vs written from shared records\n");
    println!("| prior records | copied µs | direct µs | ratio | copied allocs | direct allocs |");
    println!("|---|---|---|---|---|---|");
    for (n, reps) in [(10, 20_000), (10_000, 40)] {
        let history = history(n);
        // Warm both paths once.
        measure(&history, 2, false);
        measure(&history, 2, true);
        let (copied_us, copied_allocs) = measure(&history, reps, false);
        let (direct_us, direct_allocs) = measure(&history, reps, true);
        println!(
            "| {n} | {copied_us:.1} | {direct_us:.1} | **{:.2}×** | {copied_allocs:.0} | {direct_allocs:.0} |",
            direct_us / copied_us
        );
    }
}
