//! The HarnessRegistry admin service and startup loading, driven through the
//! deterministic world: registration outcomes, pins, retirement, static
//! names, listing, validation, the spec digest, observation and isolation of
//! stored rows this host cannot serve.

use agentsessions_machine::canon;
use agentsessions_machine::events;
use agentsessions_machine::host::registry::{MAX_SPEC_BYTES, SUBSTRATE_UNSERVABLE, canonical_spec};
use agentsessions_machine::vocab::{
    Code, Effect, EffectId, HarnessEffect, HarnessFailure, HarnessRow, Request, Response,
    StoreEffect, StoreOutcome,
};
use agentsessions_proto::v1::{
    Capabilities, CreateSessionRequest, ExecRequest, GetHarnessRequest, HarnessRegistration,
    HarnessSource, HarnessSpec, HarnessState, ListHarnessesRequest, RegisterHarnessRequest,
    RegisterHarnessResponse, RegisterOutcome, RemotePlacement, Resumability, ResumeRequest,
    RetireHarnessRequest, Session, SubstratePlacement, harness_spec::Placement,
};
use agentsessions_testkit::{Call, World};

const ADDR: &str = "10.0.0.1:9000";
const OTHER_ADDR: &str = "10.0.0.2:9000";

/// A world whose remote addresses run the echo script.
fn world() -> World {
    let mut world = World::default();
    world.remote.insert(ADDR.into(), "echo".into());
    world.remote.insert(OTHER_ADDR.into(), "echo".into());
    world
}

fn remote_spec(address: &str) -> HarnessSpec {
    HarnessSpec {
        placement: Some(Placement::Remote(RemotePlacement {
            address: address.into(),
        })),
        capabilities: Some(Capabilities {
            resumability: Resumability::StatelessReplay as i32,
            ..Capabilities::default()
        }),
        descriptor_id: String::new(),
    }
}

fn substrate_spec() -> HarnessSpec {
    HarnessSpec {
        placement: Some(Placement::Substrate(SubstratePlacement {
            atespace: "team".into(),
            template: "agent".into(),
        })),
        ..remote_spec(ADDR)
    }
}

fn register(world: &mut World, name: &str, spec: HarnessSpec) -> Call {
    world.call(Request::RegisterHarness(RegisterHarnessRequest {
        name: name.into(),
        spec: Some(spec),
    }))
}

fn registered(call: &Call) -> RegisterHarnessResponse {
    match &call.reply {
        Ok(Response::Registered(r)) => r.clone(),
        other => panic!("expected a registration: {other:?}"),
    }
}

fn harness(call: &Call) -> HarnessRegistration {
    match &call.reply {
        Ok(Response::Harness(h)) => h.clone(),
        other => panic!("expected a harness: {other:?}"),
    }
}

fn uid(reg: &HarnessRegistration) -> String {
    reg.metadata.clone().unwrap_or_default().uid
}

fn get(world: &mut World, name: &str, observe: bool) -> Call {
    world.call(Request::GetHarness(GetHarnessRequest {
        name: name.into(),
        observe,
    }))
}

fn retire(world: &mut World, name: &str, reason: &str) -> Call {
    world.call(Request::RetireHarness(RetireHarnessRequest {
        name: name.into(),
        reason: reason.into(),
    }))
}

fn list(world: &mut World, page_size: i32, page_token: &str, include_retired: bool) -> Call {
    world.call(Request::ListHarnesses(ListHarnessesRequest {
        page_size,
        page_token: page_token.into(),
        include_retired,
    }))
}

/// Names on one list page and its next token.
fn page(call: &Call) -> (Vec<String>, String) {
    match &call.reply {
        Ok(Response::Harnesses(r)) => (
            r.harnesses
                .iter()
                .map(|h| h.metadata.clone().unwrap_or_default().name)
                .collect(),
            r.next_page_token.clone(),
        ),
        other => panic!("expected a page: {other:?}"),
    }
}

/// Follows tokens from the first page; returns every page's names.
fn all_pages(world: &mut World, size: i32, include_retired: bool) -> Vec<Vec<String>> {
    let mut pages = Vec::new();
    let mut token = String::new();
    loop {
        let (names, next) = page(&list(world, size, &token, include_retired));
        pages.push(names);
        if next.is_empty() {
            return pages;
        }
        token = next;
    }
}

fn create(world: &mut World, harness: &str) -> Call {
    world.call(Request::CreateSession(CreateSessionRequest {
        session: Some(Session {
            harness: harness.into(),
            ..Default::default()
        }),
    }))
}

fn created(world: &mut World, harness: &str) -> String {
    let call = create(world, harness);
    call.session()
        .unwrap_or_else(|| panic!("created: {call:?}"))
        .metadata
        .unwrap_or_default()
        .uid
}

fn exec(world: &mut World, session: &str, harness: &str) -> Call {
    world.call(Request::Exec(ExecRequest {
        session: session.into(),
        harness: harness.into(),
        inputs: vec![events::text_message("user", "hi")],
        ..Default::default()
    }))
}

#[allow(deprecated)]
fn resume(world: &mut World, session: &str) -> Call {
    world.call(Request::Resume(ResumeRequest {
        session: session.into(),
        boot: false,
    }))
}

/// Boots the registry as a shell does after a (re)start: reserve the static
/// and reserved names, then load every stored row, retired ones included.
fn boot(world: &mut World) -> Vec<(String, String)> {
    world.boot().expect("boot").isolated
}

fn stored_rows(world: &mut World) -> Vec<HarnessRow> {
    let outcome = world.store.perform(&StoreEffect::ListHarnessRows {
        id: EffectId(0),
        after: String::new(),
        limit: usize::MAX,
        include_retired: true,
    });
    match outcome {
        StoreOutcome::HarnessRows(Ok(rows)) => rows,
        other => panic!("rows: {other:?}"),
    }
}

/// Writes a row straight into the store, as another host (or another
/// version of this one) sharing the journal would.
fn store_row(world: &mut World, name: &str, spec_text: &str, digest: &str) {
    let row = HarnessRow {
        name: name.into(),
        uid: format!("harness-{:0>24}", name.len()),
        spec: spec_text.into(),
        spec_digest: digest.into(),
        ..HarnessRow::default()
    };
    let outcome = world.store.perform(&StoreEffect::RegisterHarnessRow {
        id: EffectId(0),
        row,
        now: world.now,
    });
    assert!(
        matches!(outcome, StoreOutcome::Registered(Ok(_))),
        "{outcome:?}"
    );
}

fn store_spec(world: &mut World, name: &str, spec: &HarnessSpec) {
    let canonical = canonical_spec(spec).expect("valid spec");
    store_row(world, name, &canonical.text, &canonical.digest);
}

fn registry_writes(world: &World) -> usize {
    world
        .trace
        .iter()
        .filter(|e| matches!(e, Effect::Store(StoreEffect::RegisterHarnessRow { .. })))
        .count()
}

// ---------------------------------------------------------------------------
// Register outcomes

#[test]
fn registering_creates_then_repeats_unchanged_with_the_same_uid_and_refuses_a_different_spec() {
    let mut world = world();
    let first = registered(&register(&mut world, "reg", remote_spec(ADDR)));
    assert_eq!(first.outcome, RegisterOutcome::Created as i32);
    let reg = first.harness.clone().unwrap();
    assert!(uid(&reg).starts_with("harness-"), "{reg:?}");
    assert_eq!(reg.source, HarnessSource::Registered as i32);
    assert_eq!(reg.state, HarnessState::Active as i32);
    assert_eq!(reg.spec, Some(remote_spec(ADDR)));
    assert!(reg.unservable_reason.is_empty(), "{reg:?}");
    assert!(reg.metadata.as_ref().unwrap().create_time.is_some());

    let again = registered(&register(&mut world, "reg", remote_spec(ADDR)));
    assert_eq!(again.outcome, RegisterOutcome::Unchanged as i32);
    assert_eq!(uid(again.harness.as_ref().unwrap()), uid(&reg));

    let call = register(&mut world, "reg", remote_spec(OTHER_ADDR));
    assert_eq!(call.code(), Code::AlreadyExists, "{call:?}");
    let Err(status) = &call.reply else { panic!() };
    assert!(status.message.contains("immutable"), "{status:?}");
    // The stored spec is still the first one.
    let got = harness(&get(&mut world, "reg", false));
    assert_eq!(got.spec, Some(remote_spec(ADDR)));
}

#[test]
fn a_registered_harness_runs_sessions_created_on_it_and_by_exec_auto_create() {
    let mut world = world();
    registered(&register(&mut world, "reg", remote_spec(ADDR)));
    let sid = created(&mut world, "reg");
    let call = exec(&mut world, &sid, "");
    assert_eq!(call.reply, Ok(Response::StreamEnd), "{call:?}");
    assert_eq!(world.store.records(&sid).len(), 5);
    assert!(
        world.trace.iter().any(|e| matches!(e,
            Effect::Harness(HarnessEffect::Dial { harness, backend: agentsessions_machine::vocab::Backend::Remote { address }, .. })
                if harness == "reg" && address == ADDR)),
        "the turn ran on the registered remote"
    );

    let auto = exec(&mut world, "", "reg");
    assert_eq!(auto.code(), Code::Ok, "{auto:?}");
    let auto_sid = auto.session().unwrap().metadata.unwrap().uid;
    assert_eq!(world.store.row(&auto_sid).unwrap().harness, "reg");
}

#[test]
fn a_session_on_a_registered_harness_refuses_a_static_override_and_vice_versa() {
    let mut world = world();
    registered(&register(&mut world, "reg", remote_spec(ADDR)));
    let on_reg = created(&mut world, "reg");
    let on_echo = created(&mut world, "echo");

    for (sid, over) in [(&on_reg, "echo"), (&on_echo, "reg")] {
        let call = exec(&mut world, sid, over);
        assert_eq!(call.code(), Code::FailedPrecondition, "{call:?}");
        let Err(status) = &call.reply else { panic!() };
        assert!(status.message.contains("pinned"), "{status:?}");
        assert!(world.store.records(sid).is_empty(), "nothing journaled");
    }
    // Static to static still works for one turn.
    assert_eq!(exec(&mut world, &on_echo, "tools").code(), Code::Ok);
}

#[test]
fn a_remote_harness_needing_memory_snapshots_registers_but_cannot_be_placed() {
    let mut world = world();
    world.remote.insert("10.0.0.9:1".into(), "counter".into());
    let mut spec = remote_spec("10.0.0.9:1");
    spec.capabilities = Some(Capabilities {
        resumability: Resumability::RequiresMemorySnapshot as i32,
        ..Capabilities::default()
    });
    let reg = registered(&register(&mut world, "mem", spec));
    assert_eq!(reg.outcome, RegisterOutcome::Created as i32);
    let sid = created(&mut world, "mem");
    let call = exec(&mut world, &sid, "");
    assert_eq!(call.code(), Code::FailedPrecondition, "{call:?}");
    let Err(status) = &call.reply else { panic!() };
    assert!(
        status.message.contains("REQUIRES_MEMORY_SNAPSHOT"),
        "{status:?}"
    );
    assert!(world.store.records(&sid).is_empty());
}

// ---------------------------------------------------------------------------
// Retirement

#[test]
fn retiring_refuses_new_sessions_while_existing_ones_exec_and_resume() {
    let mut world = world();
    registered(&register(&mut world, "reg", remote_spec(ADDR)));
    let sid = created(&mut world, "reg");
    assert_eq!(exec(&mut world, &sid, "").code(), Code::Ok);

    let retired = harness(&retire(&mut world, "reg", "replaced by reg2"));
    assert_eq!(retired.state, HarnessState::Retired as i32);
    assert_eq!(retired.retire_reason, "replaced by reg2");
    let first_time = retired.retire_time;
    assert!(first_time.is_some());

    let call = create(&mut world, "reg");
    assert_eq!(call.code(), Code::FailedPrecondition, "{call:?}");
    let call = exec(&mut world, "", "reg");
    assert_eq!(call.code(), Code::FailedPrecondition, "{call:?}");

    assert_eq!(exec(&mut world, &sid, "").code(), Code::Ok);
    assert_eq!(resume(&mut world, &sid).code(), Code::Ok);
    assert_eq!(world.store.records(&sid).len(), 11);

    // Retiring again keeps the first reason and time.
    let again = harness(&retire(&mut world, "reg", "second"));
    assert_eq!(again.retire_reason, "replaced by reg2");
    assert_eq!(again.retire_time, first_time);
    // Retired rows are listed only on request.
    assert_eq!(all_pages(&mut world, 50, false).concat(), static_names());
    assert!(
        all_pages(&mut world, 50, true)
            .concat()
            .contains(&"reg".to_owned())
    );
}

#[test]
fn re_registering_a_retired_harness_reactivates_it_with_the_same_uid() {
    let mut world = world();
    let first = registered(&register(&mut world, "reg", remote_spec(ADDR)));
    retire(&mut world, "reg", "pause");
    let again = registered(&register(&mut world, "reg", remote_spec(ADDR)));
    assert_eq!(again.outcome, RegisterOutcome::Reactivated as i32);
    let reg = again.harness.unwrap();
    assert_eq!(uid(&reg), uid(first.harness.as_ref().unwrap()));
    assert_eq!(reg.state, HarnessState::Active as i32);
    assert_eq!(reg.retire_time, None);
    assert!(reg.retire_reason.is_empty());
    assert_eq!(create(&mut world, "reg").code(), Code::Ok);
}

#[test]
fn retire_input_is_checked_before_the_store() {
    let mut world = world();
    assert_eq!(retire(&mut world, "", "x").code(), Code::InvalidArgument);
    let long = "r".repeat(1025);
    registered(&register(&mut world, "reg", remote_spec(ADDR)));
    assert_eq!(
        retire(&mut world, "reg", &long).code(),
        Code::InvalidArgument
    );
    assert_eq!(
        harness(&retire(&mut world, "reg", &"r".repeat(1024))).state,
        HarnessState::Retired as i32
    );
    assert_eq!(retire(&mut world, "nope", "x").code(), Code::NotFound);
}

// ---------------------------------------------------------------------------
// Static and reserved names

fn static_names() -> Vec<String> {
    ["approval", "counter", "echo", "tools", "unmediated"]
        .map(String::from)
        .to_vec()
}

#[test]
fn static_names_are_read_only_and_reserved_names_unregistrable() {
    let mut config = agentsessions_testkit::world::config();
    config.reserved.push("chat".into());
    let mut world = World::new(config);
    world.remote.insert(ADDR.into(), "echo".into());

    for name in ["echo", "counter", "chat"] {
        let call = register(&mut world, name, remote_spec(ADDR));
        assert_eq!(call.code(), Code::AlreadyExists, "{name}: {call:?}");
    }
    assert_eq!(registry_writes(&world), 0, "refused before the store");

    let call = retire(&mut world, "echo", "no");
    assert_eq!(call.code(), Code::FailedPrecondition, "{call:?}");

    let echo = harness(&get(&mut world, "echo", false));
    assert_eq!(echo.source, HarnessSource::Static as i32);
    assert_eq!(echo.state, HarnessState::Active as i32);
    assert_eq!(echo.spec, None);
    assert!(echo.spec_digest.is_empty());
    assert_eq!(echo.metadata.unwrap().name, "echo");

    assert_eq!(get(&mut world, "chat", false).code(), Code::NotFound);
    assert_eq!(get(&mut world, "", false).code(), Code::InvalidArgument);
    assert_eq!(retire(&mut world, "chat", "x").code(), Code::NotFound);
    assert!(
        !all_pages(&mut world, 50, true)
            .concat()
            .contains(&"chat".to_owned()),
        "reserved-only names are not listed"
    );
    assert_eq!(
        world.host.reserved_names(),
        ["approval", "chat", "counter", "echo", "tools", "unmediated"].map(String::from)
    );
}

// ---------------------------------------------------------------------------
// Listing

#[test]
fn list_merges_static_and_registered_names_in_order_with_paging() {
    let mut world = world();
    for name in ["aaa", "dog", "zed"] {
        registered(&register(&mut world, name, remote_spec(ADDR)));
    }
    retire(&mut world, "dog", "old");
    let mut active = static_names();
    active.extend(["aaa", "zed"].map(String::from));
    active.sort();
    let mut everything = active.clone();
    everything.push("dog".into());
    everything.sort();

    let one = all_pages(&mut world, 1, false);
    assert!(one.iter().all(|p| p.len() == 1), "{one:?}");
    assert_eq!(one.concat(), active);
    let two = all_pages(&mut world, 2, false);
    assert!(two.iter().all(|p| p.len() <= 2) && two.len() == active.len().div_ceil(2));
    assert_eq!(two.concat(), active);
    assert_eq!(all_pages(&mut world, 2, true).concat(), everything);
    let whole = all_pages(&mut world, 0, true);
    assert_eq!(whole.len(), 1, "a default page holds them all");

    let call = list(&mut world, 50, "", true);
    let Ok(Response::Harnesses(resp)) = &call.reply else {
        panic!()
    };
    for h in &resp.harnesses {
        let name = &h.metadata.as_ref().unwrap().name;
        let want = if static_names().contains(name) {
            HarnessSource::Static
        } else {
            HarnessSource::Registered
        };
        assert_eq!(h.source, want as i32, "{name}");
    }
}

#[test]
fn list_refuses_a_malformed_token_and_a_negative_size_and_clamps_large_sizes() {
    let mut world = world();
    for token in ["!!", "_w"] {
        let call = list(&mut world, 1, token, false);
        assert_eq!(call.code(), Code::InvalidArgument, "{token}: {call:?}");
    }
    assert_eq!(
        list(&mut world, -1, "", false).code(),
        Code::InvalidArgument
    );
    list(&mut world, 100_000, "", false);
    list(&mut world, 0, "", false);
    let limits: Vec<usize> = world
        .trace
        .iter()
        .filter_map(|e| match e {
            Effect::Store(StoreEffect::ListHarnessRows { limit, .. }) => Some(*limit),
            _ => None,
        })
        .collect();
    assert_eq!(limits, vec![501, 51]);
}

// ---------------------------------------------------------------------------
// Validation

#[test]
fn names_must_be_rfc1123_labels() {
    let mut world = world();
    let cases = [
        ("", false),
        ("Upper", false),
        ("a_b", false),
        ("-lead", false),
        ("trail-", false),
        ("dot.ted", false),
        (&"a".repeat(64) as &str, false),
        ("a", true),
        ("0", true),
        ("with-dash-9", true),
        (&"b".repeat(63) as &str, true),
    ];
    for (name, ok) in cases {
        let call = register(&mut world, name, remote_spec(ADDR));
        let want = if ok { Code::Ok } else { Code::InvalidArgument };
        assert_eq!(call.code(), want, "{name:?}: {call:?}");
    }
}

#[test]
fn specs_are_validated_before_anything_is_stored() {
    let mut world = world();
    let caps = |r: i32| {
        Some(Capabilities {
            resumability: r,
            ..Capabilities::default()
        })
    };
    let no_placement = HarnessSpec {
        placement: None,
        ..remote_spec(ADDR)
    };
    let empty_address = remote_spec("");
    let half_substrate = HarnessSpec {
        placement: Some(Placement::Substrate(SubstratePlacement {
            atespace: "team".into(),
            template: String::new(),
        })),
        ..remote_spec(ADDR)
    };
    let no_caps = HarnessSpec {
        capabilities: None,
        ..remote_spec(ADDR)
    };
    let unspecified = HarnessSpec {
        capabilities: caps(0),
        ..remote_spec(ADDR)
    };
    let unknown_enum = HarnessSpec {
        capabilities: caps(7),
        ..remote_spec(ADDR)
    };
    let oversized = HarnessSpec {
        descriptor_id: "d".repeat(MAX_SPEC_BYTES),
        ..remote_spec(ADDR)
    };
    let cases = [
        ("no-placement", Some(no_placement)),
        ("empty-address", Some(empty_address)),
        ("half-substrate", Some(half_substrate)),
        ("no-caps", Some(no_caps)),
        ("unspecified", Some(unspecified)),
        ("unknown-enum", Some(unknown_enum)),
        ("oversized", Some(oversized)),
        ("nil", None),
    ];
    for (name, spec) in cases {
        let call = world.call(Request::RegisterHarness(RegisterHarnessRequest {
            name: name.into(),
            spec,
        }));
        assert_eq!(call.code(), Code::InvalidArgument, "{name}: {call:?}");
        let Err(status) = &call.reply else { panic!() };
        assert!(status.message.starts_with("spec: "), "{name}: {status:?}");
    }

    let call = register(&mut world, "sub", substrate_spec());
    assert_eq!(call.code(), Code::FailedPrecondition, "{call:?}");
    let Err(status) = &call.reply else { panic!() };
    assert_eq!(status.message, SUBSTRATE_UNSERVABLE);
    assert_eq!(registry_writes(&world), 0, "nothing stored");
    assert!(stored_rows(&mut world).is_empty());
}

#[test]
fn a_conflicting_row_outranks_an_unservable_placement() {
    let mut world = world();
    store_spec(&mut world, "taken", &remote_spec(ADDR));
    let call = register(&mut world, "taken", substrate_spec());
    assert_eq!(call.code(), Code::AlreadyExists, "{call:?}");
    // The identical substrate row, registered elsewhere, is still unservable here.
    store_spec(&mut world, "elsewhere", &substrate_spec());
    let call = register(&mut world, "elsewhere", substrate_spec());
    assert_eq!(call.code(), Code::FailedPrecondition, "{call:?}");
    assert_eq!(registry_writes(&world), 0);
}

#[test]
fn the_spec_digest_is_the_canonical_digest_and_matches_the_reference_vectors() {
    let mut world = world();
    let spec = HarnessSpec {
        descriptor_id: "echo".into(),
        ..remote_spec("127.0.0.1:9000")
    };
    let reg = registered(&register(&mut world, "vec", spec.clone()))
        .harness
        .unwrap();
    assert_eq!(Ok(reg.spec_digest.clone()), canon::spec_digest(&spec));
    assert_eq!(
        reg.spec_digest,
        "sha256:f0c96c8b67d5dc75be557f64ccd59496eaf9cfb102754ee54e9d4c571eb2eafc"
    );
    let row = stored_rows(&mut world).remove(0);
    assert_eq!(
        row.spec,
        r#"{"capabilities":{"resumability":"RESUMABILITY_STATELESS_REPLAY"},"descriptor_id":"echo","remote":{"address":"127.0.0.1:9000"}}"#
    );
    assert_eq!(row.spec_digest, reg.spec_digest);

    let unix = remote_spec("unix:///run/h.sock");
    let text = r#"{"capabilities":{"resumability":"RESUMABILITY_STATELESS_REPLAY"},"remote":{"address":"unix:///run/h.sock"}}"#;
    let reg = registered(&register(&mut world, "unix", unix))
        .harness
        .unwrap();
    assert_eq!(
        reg.spec_digest,
        format!("sha256:{}", canon::sha256_hex(text.as_bytes()))
    );
}

// ---------------------------------------------------------------------------
// Observation

#[test]
fn observe_returns_the_descriptor_for_static_and_registered_harnesses() {
    let mut world = world();
    registered(&register(&mut world, "reg", remote_spec(ADDR)));
    for name in ["echo", "reg"] {
        let reg = harness(&get(&mut world, name, true));
        assert_eq!(
            reg.observed.map(|d| d.id),
            Some("echo".to_owned()),
            "{name}"
        );
        assert!(reg.observe_error.is_empty());
        assert!(harness(&get(&mut world, name, false)).observed.is_none());
    }
    world
        .describe_fail
        .insert("reg".into(), HarnessFailure::Timeout);
    let call = get(&mut world, "reg", true);
    assert_eq!(
        call.code(),
        Code::Ok,
        "a failed observation is not an RPC error"
    );
    let reg = harness(&call);
    assert!(reg.observed.is_none());
    assert!(reg.observe_error.starts_with("describe: "), "{reg:?}");
}

/// A row another host added after this one started is listed but not
/// routed here; observing it says so instead of leaving both fields empty.
#[test]
fn observe_sets_observe_error_for_a_row_this_host_has_not_loaded() {
    let mut world = world();
    store_spec(&mut world, "late", &remote_spec(ADDR));
    let mark = world.trace.len();
    let reg = harness(&get(&mut world, "late", true));
    assert!(reg.observed.is_none());
    assert!(
        reg.observe_error.contains("not loaded on this host"),
        "{reg:?}"
    );
    assert!(reg.unservable_reason.contains("not loaded"), "{reg:?}");
    let described = world.trace[mark..]
        .iter()
        .any(|e| matches!(e, Effect::Harness(HarnessEffect::Describe { .. })));
    assert!(!described, "an unloaded row is never described");
    assert!(
        harness(&get(&mut world, "late", false))
            .observe_error
            .is_empty()
    );
}

// ---------------------------------------------------------------------------
// Startup loading and isolation

#[test]
fn restart_reloads_registrations_and_retired_ones_keep_their_sessions() {
    let mut world = world();
    registered(&register(&mut world, "reg", remote_spec(ADDR)));
    let sid = created(&mut world, "reg");
    assert_eq!(exec(&mut world, &sid, "").code(), Code::Ok);
    retire(&mut world, "reg", "old");

    world.restart();
    // Before loading, the name is unknown to this host's routing.
    assert_eq!(exec(&mut world, &sid, "").code(), Code::InvalidArgument);
    assert!(boot(&mut world).is_empty());
    let reg = harness(&get(&mut world, "reg", false));
    assert_eq!(reg.state, HarnessState::Retired as i32);
    assert!(reg.unservable_reason.is_empty(), "{reg:?}");
    assert_eq!(exec(&mut world, &sid, "").code(), Code::Ok);
    assert_eq!(create(&mut world, "reg").code(), Code::FailedPrecondition);
}

#[test]
fn the_startup_loader_isolates_rows_it_cannot_serve_while_good_rows_work() {
    let mut world = world();
    store_spec(&mut world, "good", &remote_spec(ADDR));
    let bad_field = r#"{"capabilities":{"resumability":"RESUMABILITY_STATELESS_REPLAY"},"remote":{"address":"x:1"},"zone":"eu"}"#;
    store_row(&mut world, "bad-field", bad_field, "sha256:aa");
    let bad_enum =
        r#"{"capabilities":{"resumability":"RESUMABILITY_TELEPORT"},"remote":{"address":"x:1"}}"#;
    store_row(&mut world, "bad-enum", bad_enum, "sha256:bb");
    store_spec(&mut world, "sub", &substrate_spec());

    world.restart();
    let isolated = boot(&mut world);
    let names: Vec<&str> = isolated.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["bad-enum", "bad-field", "sub"]);
    assert_eq!(
        world.host.unservable_reason("sub"),
        Some(SUBSTRATE_UNSERVABLE)
    );

    let bad = harness(&get(&mut world, "bad-field", true));
    assert_eq!(bad.spec, None);
    assert_eq!(bad.spec_digest, "sha256:aa");
    assert!(bad.unservable_reason.contains("version skew"), "{bad:?}");
    assert!(!bad.observe_error.is_empty());
    assert!(bad.observed.is_none());
    let described = world
        .trace
        .iter()
        .any(|e| matches!(e, Effect::Harness(HarnessEffect::Describe { harness, .. }) if harness == "bad-field"));
    assert!(!described, "unservable entries are never described");

    for name in ["bad-field", "bad-enum", "sub"] {
        let call = create(&mut world, name);
        assert_eq!(call.code(), Code::FailedPrecondition, "{name}: {call:?}");
        assert_eq!(exec(&mut world, "", name).code(), Code::FailedPrecondition);
    }
    let call = register(&mut world, "bad-field", remote_spec(ADDR));
    assert_eq!(call.code(), Code::AlreadyExists, "{call:?}");

    let sid = created(&mut world, "good");
    assert_eq!(exec(&mut world, &sid, "").code(), Code::Ok);
    let listed = all_pages(&mut world, 2, true).concat();
    for name in ["bad-enum", "bad-field", "good", "sub"] {
        assert!(listed.contains(&name.to_owned()), "{name} listed");
    }
}

#[test]
fn repeating_the_registration_of_an_unservable_row_reports_it_without_loading() {
    let mut world = world();
    store_spec(&mut world, "sub", &substrate_spec());
    world.restart();
    boot(&mut world);

    let again = registered(&register(&mut world, "sub", substrate_spec()));
    assert_eq!(again.outcome, RegisterOutcome::Unchanged as i32);
    let reg = again.harness.unwrap();
    assert_eq!(reg.unservable_reason, SUBSTRATE_UNSERVABLE);

    retire(&mut world, "sub", "x");
    let back = registered(&register(&mut world, "sub", substrate_spec()));
    assert_eq!(back.outcome, RegisterOutcome::Reactivated as i32);
    assert_eq!(
        back.harness.unwrap().unservable_reason,
        SUBSTRATE_UNSERVABLE
    );
    assert_eq!(create(&mut world, "sub").code(), Code::FailedPrecondition);
}

#[test]
fn a_row_another_host_added_is_served_only_after_an_identical_local_registration() {
    let mut world = world();
    store_spec(&mut world, "late", &remote_spec(ADDR));
    let reg = harness(&get(&mut world, "late", false));
    assert!(
        reg.unservable_reason.contains("not loaded on this host"),
        "{reg:?}"
    );
    assert_eq!(create(&mut world, "late").code(), Code::InvalidArgument);
    assert_eq!(exec(&mut world, "", "late").code(), Code::InvalidArgument);

    let again = registered(&register(&mut world, "late", remote_spec(ADDR)));
    assert_eq!(again.outcome, RegisterOutcome::Unchanged as i32);
    assert!(again.harness.unwrap().unservable_reason.is_empty());
    let sid = created(&mut world, "late");
    assert_eq!(exec(&mut world, &sid, "").code(), Code::Ok);
}

#[test]
fn a_stored_row_under_a_static_name_is_reported_and_fails_closed() {
    let mut world = world();
    store_spec(&mut world, "echo", &remote_spec(ADDR));
    // The boot fails on the reservation, which stops the daemon's startup.
    let booted = world.boot();
    assert_eq!(
        booted.as_ref().map_err(|s| s.code),
        Err(Code::FailedPrecondition),
        "{booted:?}"
    );
    // Loaded anyway (as a shell that ignored the failure would), the row
    // is reported and the name stays static.
    let rows = stored_rows(&mut world);
    let isolated = world.host.load_registrations(&rows);
    assert_eq!(isolated.len(), 1);
    assert_eq!(isolated[0].0, "echo");
    assert_eq!(world.host.unservable_reason("echo"), None);
    assert_eq!(create(&mut world, "echo").code(), Code::FailedPrecondition);
}

#[test]
fn boot_pages_through_every_stored_row_and_serves_the_last_page() {
    let mut world = world();
    // More rows than one 500-row boot page.
    let n = 503;
    for i in 0..n {
        store_spec(&mut world, &format!("h{i:04}"), &remote_spec(ADDR));
    }
    let report = world.boot().expect("boot");
    assert_eq!(report.loaded, n);
    assert!(report.isolated.is_empty(), "{:?}", report.isolated);
    let sid = created(&mut world, &format!("h{:04}", n - 1));
    assert_eq!(exec(&mut world, &sid, "").code(), Code::Ok);
}
