//! Session listing (keyset paging, tokens) and the harness registry.

mod common;

use agentsessions_shells::journal::{
    HarnessRegistration, HarnessState, JournalStore, ListHarnesses, ListSessions, RegisterOutcome,
    RegistryError, SessionMeta, StoreError, page_token,
};
use common::*;

fn meta(uid: &str, project: &str, created_at: i64) -> SessionMeta {
    SessionMeta {
        uid: uid.into(),
        project: project.into(),
        created_at,
        ..Default::default()
    }
}

#[tokio::test]
async fn list_sessions_pages_newest_first_with_uid_tiebreak() {
    let db = TempDb::new();
    let store = db.open();
    // Ties on created_at must order by uid ascending.
    let rows = [
        ("e", 50),
        ("a", 30),
        ("c", 30),
        ("b", 30),
        ("d", 40),
        ("f", 10),
        ("g", 20),
    ];
    for (uid, at) in rows {
        store.put_session(meta(uid, "p", at), 1).await.unwrap();
    }
    store.put_session(meta("other", "q", 99), 1).await.unwrap();
    store.put_session(meta("dflt", "", 99), 1).await.unwrap();
    store
        .append(batch("a", 0, 0, vec![input("x"), input("y")]))
        .await
        .unwrap();

    let mut seen = Vec::new();
    let mut token = String::new();
    let mut pages = 0;
    loop {
        let page = store
            .list_sessions(ListSessions {
                project: "p".into(),
                page_size: 3,
                page_token: token,
            })
            .await
            .unwrap();
        pages += 1;
        assert!(page.sessions.len() <= 3);
        if !page.next_page_token.is_empty() {
            let last = page.sessions.last().unwrap();
            assert_eq!(
                page.next_page_token,
                page_token::encode(last.meta.created_at, &last.meta.uid)
            );
        }
        seen.extend(
            page.sessions
                .iter()
                .map(|s| (s.meta.uid.clone(), s.last_seq)),
        );
        token = page.next_page_token;
        if token.is_empty() {
            break;
        }
    }
    assert_eq!(pages, 3);
    let uids: Vec<&str> = seen.iter().map(|(u, _)| u.as_str()).collect();
    assert_eq!(uids, ["e", "d", "a", "b", "c", "g", "f"]);
    assert_eq!(
        seen.iter().find(|(u, _)| u == "a").unwrap().1,
        2,
        "last_seq joins the journal head"
    );

    // An exact multiple of the page size ends with an empty token, not an empty page.
    let page = store
        .list_sessions(ListSessions {
            project: "p".into(),
            page_size: 7,
            page_token: String::new(),
        })
        .await
        .unwrap();
    assert_eq!(
        (page.sessions.len(), page.next_page_token.as_str()),
        (7, "")
    );

    // "" is the default project, never "all".
    let page = store.list_sessions(ListSessions::default()).await.unwrap();
    assert_eq!(
        page.sessions
            .iter()
            .map(|s| s.meta.uid.as_str())
            .collect::<Vec<_>>(),
        ["dflt"]
    );

    for bad in ["***", "MTIAdQ==", &page_token::encode(1, "x")[..3]] {
        let r = store
            .list_sessions(ListSessions {
                project: "p".into(),
                page_size: 3,
                page_token: bad.into(),
            })
            .await;
        assert!(
            matches!(r, Err(StoreError::InvalidPageToken)),
            "{bad}: {r:?}"
        );
    }
}

#[tokio::test]
async fn list_sessions_defaults_to_50_and_clamps_at_500() {
    let db = TempDb::new();
    let store = db.open();
    let writes: Vec<_> = (0..520)
        .map(|i| store.put_session(meta(&format!("s{i:04}"), "p", i), 1))
        .collect();
    for w in writes {
        w.await.unwrap();
    }
    let list = |size| {
        store.list_sessions(ListSessions {
            project: "p".into(),
            page_size: size,
            page_token: String::new(),
        })
    };
    let page = list(0).await.unwrap();
    assert_eq!(page.sessions.len(), 50);
    assert_eq!(page.sessions[0].meta.uid, "s0519");
    let page = list(10_000).await.unwrap();
    assert_eq!(page.sessions.len(), 500);
    let rest = store
        .list_sessions(ListSessions {
            project: "p".into(),
            page_size: 10_000,
            page_token: page.next_page_token,
        })
        .await
        .unwrap();
    assert_eq!(rest.sessions.len(), 20);
    assert_eq!(rest.next_page_token, "");
}

fn reg(name: &str, digest: &str) -> HarnessRegistration {
    HarnessRegistration {
        name: name.into(),
        uid: format!("harness-{name}-{digest}"),
        spec: format!(r#"{{"descriptor_id":"{digest}"}}"#),
        spec_digest: format!("sha256:{digest}"),
    }
}

#[tokio::test]
async fn registry_register_retire_reactivate() {
    let db = TempDb::new();
    let store = db.open();
    let (row, out) = store.register_harness(reg("h1", "aa"), 10).await.unwrap();
    assert_eq!(out, RegisterOutcome::Created);
    assert_eq!(
        (row.state, row.created_at, row.uid.as_str()),
        (HarnessState::Active, 10, "harness-h1-aa")
    );

    // Same digest (even with another uid): unchanged, original uid and time kept.
    let again = HarnessRegistration {
        uid: "harness-other".into(),
        ..reg("h1", "aa")
    };
    let (row, out) = store.register_harness(again, 20).await.unwrap();
    assert_eq!(out, RegisterOutcome::Unchanged);
    assert_eq!((row.uid.as_str(), row.created_at), ("harness-h1-aa", 10));

    assert!(matches!(
        store.register_harness(reg("h1", "bb"), 30).await,
        Err(RegistryError::SpecConflict { .. })
    ));

    let retired = store.retire_harness("h1", "first", 40).await.unwrap();
    assert_eq!(
        (
            retired.state,
            retired.retire_reason.as_str(),
            retired.retired_at
        ),
        (HarnessState::Retired, "first", 40)
    );
    let again = store.retire_harness("h1", "second", 50).await.unwrap();
    assert_eq!(
        (again.retire_reason.as_str(), again.retired_at),
        ("first", 40),
        "retire is idempotent"
    );
    assert!(matches!(
        store.retire_harness("nope", "r", 1).await,
        Err(RegistryError::NotFound { .. })
    ));

    // A retired spec conflicts just the same; the same spec reactivates.
    assert!(matches!(
        store.register_harness(reg("h1", "bb"), 55).await,
        Err(RegistryError::SpecConflict { .. })
    ));
    let (row, out) = store.register_harness(reg("h1", "aa"), 60).await.unwrap();
    assert_eq!(out, RegisterOutcome::Reactivated);
    assert_eq!(
        (
            row.state,
            row.retire_reason.as_str(),
            row.retired_at,
            row.created_at,
            row.updated_at
        ),
        (HarnessState::Active, "", 0, 10, 60)
    );

    let missing = HarnessRegistration {
        spec_digest: String::new(),
        ..reg("h2", "cc")
    };
    assert!(matches!(
        store.register_harness(missing, 1).await,
        Err(RegistryError::Failed(StoreError::InvalidArgument(_)))
    ));
    assert!(matches!(
        store.harness("h2").await,
        Err(RegistryError::NotFound { .. })
    ));
    assert_eq!(store.harness("h1").await.unwrap().spec_digest, "sha256:aa");
}

#[tokio::test]
async fn registry_reservations_are_permanent_and_all_or_nothing() {
    let db = TempDb::new();
    let store = db.open();
    store.register_harness(reg("taken", "aa"), 1).await.unwrap();
    let r = store
        .reserve_harness_names(vec!["echo".into(), "taken".into()], 2)
        .await;
    assert!(
        matches!(r, Err(RegistryError::NameCollision { ref name }) if name == "taken"),
        "{r:?}"
    );
    // Nothing of the failed call was reserved.
    store.register_harness(reg("echo", "bb"), 3).await.unwrap();
    store.retire_harness("echo", "r", 4).await.unwrap();
    // A retired row still collides.
    assert!(matches!(
        store.reserve_harness_names(vec!["echo".into()], 5).await,
        Err(RegistryError::NameCollision { .. })
    ));
    assert!(matches!(
        store.reserve_harness_names(vec![String::new()], 5).await,
        Err(RegistryError::Failed(StoreError::InvalidArgument(_)))
    ));
    store
        .reserve_harness_names(vec!["chat".into(), "static".into()], 6)
        .await
        .unwrap();
    store
        .reserve_harness_names(vec!["chat".into()], 7)
        .await
        .unwrap();
    assert!(matches!(
        store.register_harness(reg("chat", "cc"), 8).await,
        Err(RegistryError::NameReserved { .. })
    ));
    // Reserved-only names have no registration row.
    assert!(matches!(
        store.harness("chat").await,
        Err(RegistryError::NotFound { .. })
    ));

    let all = store
        .list_harnesses(ListHarnesses {
            after: String::new(),
            limit: 10,
            include_retired: true,
        })
        .await
        .unwrap();
    assert_eq!(
        all.iter().map(|h| h.name.as_str()).collect::<Vec<_>>(),
        ["echo", "taken"]
    );
    let active = store
        .list_harnesses(ListHarnesses {
            after: String::new(),
            limit: 10,
            include_retired: false,
        })
        .await
        .unwrap();
    assert_eq!(
        active.iter().map(|h| h.name.as_str()).collect::<Vec<_>>(),
        ["taken"]
    );
    let after = store
        .list_harnesses(ListHarnesses {
            after: "echo".into(),
            limit: 1,
            include_retired: true,
        })
        .await
        .unwrap();
    assert_eq!(
        after.iter().map(|h| h.name.as_str()).collect::<Vec<_>>(),
        ["taken"]
    );
}

#[tokio::test]
async fn sessions_only_land_on_active_harnesses() {
    let db = TempDb::new();
    let store = db.open();
    let on = |harness: &str, uid: &str| SessionMeta {
        uid: uid.into(),
        harness: harness.into(),
        ..Default::default()
    };
    assert!(matches!(
        store
            .put_session_on_active_harness(on("reg", "s1"), true, 1)
            .await,
        Err(RegistryError::NotFound { .. })
    ));
    store.register_harness(reg("reg", "aa"), 1).await.unwrap();
    store
        .put_session_on_active_harness(on("reg", "s1"), true, 2)
        .await
        .unwrap();
    assert_eq!(store.session_info("s1").await.unwrap().meta.harness, "reg");
    // A static harness must not have a registration row.
    assert!(matches!(
        store
            .put_session_on_active_harness(on("reg", "s2"), false, 3)
            .await,
        Err(RegistryError::NameCollision { .. })
    ));
    store
        .put_session_on_active_harness(on("echo", "s3"), false, 3)
        .await
        .unwrap();
    store.retire_harness("reg", "done", 4).await.unwrap();
    assert!(matches!(
        store
            .put_session_on_active_harness(on("reg", "s4"), true, 5)
            .await,
        Err(RegistryError::Retired { .. })
    ));
    assert!(matches!(
        store.session_info("s4").await,
        Err(StoreError::SessionNotFound { .. })
    ));
    assert!(matches!(
        store.session_info("s2").await,
        Err(StoreError::SessionNotFound { .. })
    ));
}
