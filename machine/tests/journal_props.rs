//! Property tests: the projections never panic on arbitrary journals built
//! from plausible pieces (right or wrong bodies, missing ids, stray approval
//! records, forks), and what they return is internally consistent.

#[path = "support/journal_log.rs"]
mod jl;

use agentsessions_machine::events;
use agentsessions_machine::journal::approval::{scan, scan_agrees_with_grouped_scan};
use agentsessions_machine::journal::executions::{
    ExecKind, check_inherited_intent, needs_describe, project, replay_selection, resume_invocation,
    select_pending, validate_inputs,
};
use agentsessions_machine::journal::legacy::{compat_invocation_id, legacy_prefix};
use agentsessions_machine::journal::projection::{compute_state_after, session_status};
use agentsessions_proto::v1::{ComputeState, Event, EventKind, Mediation, lifecycle};
use jl::*;
use proptest::prelude::*;

const IDS: [&str; 3] = ["", "e1aaaaaaaaaaaaaa", "e2bbbbbbbbbbbbbb"];
const CALLS: [&str; 3] = ["c1", "c2", ""];

fn piece() -> impl Strategy<Value = Event> {
    (0usize..3, 0usize..17, 0usize..3, 0i64..8, any::<bool>()).prop_map(
        |(id, which, call_ix, seq, flag)| {
            let id = IDS[id];
            let c = CALLS[call_ix];
            match which {
                0 => start(id, if flag { Some(seq % 3) } else { None }),
                1 => input(id, "x"),
                2 => model_call(id),
                3 => output(id, "y"),
                4 => usage(id),
                5 => ordinary_call(id, c),
                6 => gated_call(id, c),
                7 => tool_call_ev(
                    id,
                    call(c, Mediation::RequiresApproval, if flag { "k" } else { "" }),
                ),
                8 => result(id, c),
                9 => receipt(id, c, seq, seq + 1),
                10 => request(id, c),
                11 => decision(id, c, seq, flag),
                12 => end(id),
                13 => error(id),
                14 => events::fork_marker(seq),
                15 => lifecycle(if flag {
                    lifecycle::Kind::LifecycleSuspend
                } else {
                    lifecycle::Kind::LifecycleResume
                }),
                _ => {
                    let kinds = [
                        EventKind::EventInput,
                        EventKind::EventToolCall,
                        EventKind::EventToolResult,
                        EventKind::EventApprovalRequest,
                        EventKind::EventExecutionStart,
                        EventKind::EventParked,
                    ];
                    bodiless(id, kinds[usize::try_from(seq).unwrap_or(0) % kinds.len()])
                }
            }
        },
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn projections_never_panic_and_stay_consistent(evs in prop::collection::vec(piece(), 0..24)) {
        let mut log = Log::new();
        log.extend(evs);
        let records = &log.records;
        let n = records.len();

        let prefix = legacy_prefix(records);
        if let Ok(p) = prefix {
            prop_assert!(p <= n);
        }
        match project(records) {
            Ok(p) => {
                prop_assert_eq!(Ok(p.prefix_end), prefix);
                for e in &p.executions {
                    prop_assert!(e.start <= n && e.history_end <= n);
                    prop_assert!(e.stream.windows(2).all(|w| w[0] < w[1]));
                    prop_assert!(e.stream.iter().all(|&i| i < n));
                    prop_assert_eq!(e.kind == ExecKind::Legacy, e.id.is_empty());
                    if e.completed {
                        prop_assert!(validate_inputs(e).is_ok());
                    }
                }
                let sel = replay_selection(&p);
                let _ = needs_describe(&sel, records);
                if let Ok(Some(e)) = select_pending(records, &p) {
                    prop_assert!(!e.completed);
                    prop_assert!(e.start <= n);
                    let _ = check_inherited_intent(records, &e);
                    if e.kind == ExecKind::Legacy {
                        prop_assert!(e.anchor.is_some_and(|a| a < n));
                    }
                }
            }
            Err(e) => {
                prop_assert!(e.is_invalid_log(), "projection error is invalid-log: {}", e);
                prop_assert!(resume_invocation(records).is_err());
            }
        }

        // The shortcut for journals without a gate answers as the full scan.
        prop_assert!(scan_agrees_with_grouped_scan(records, 0));
        if n > 0 {
            prop_assert!(scan_agrees_with_grouped_scan(records, records[n / 2].seq));
        }
        let full = scan(records, 0);
        if let Ok(s) = &full {
            prop_assert!(s.selected.is_none_or(|i| i < s.states.len()));
            prop_assert_eq!(s.head, log.head());
            prop_assert_eq!(Ok(s.clone()), scan(records, log.head()));
            for st in &s.states {
                prop_assert_eq!(st.head, s.head);
                prop_assert!(!st.execution_id.is_empty());
            }
        }
        for cursor in [-1, 0, 1, log.head() / 2, log.head()] {
            let _ = scan(records, cursor);
            let _ = session_status(records, cursor);
        }
        let mut state = ComputeState::Unspecified;
        for r in records {
            if let Some(ev) = r.event.as_ref() {
                state = compute_state_after(state, ev);
            }
            let _ = compat_invocation_id("uid", r);
        }
    }
}
