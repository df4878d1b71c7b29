//! TLS to the database, against a real TLS-only server (a throwaway
//! cluster with a certificate from a test CA): verified connections work,
//! and every way of not verifying is refused.

use agentsessions_journal::{JournalStore, StoreError};
use agentsessions_pg::copy::Side;
use agentsessions_pg::{PgJournal, PgOptions};

#[path = "../../shells/tests/support/pg.rs"]
mod pg;

fn with_ca(ca: &std::path::Path) -> PgOptions {
    PgOptions {
        ca_file: Some(ca.to_path_buf()),
        ..PgOptions::default()
    }
}

#[tokio::test]
async fn a_tls_only_server_is_used_when_verified_and_refused_otherwise() {
    let certs = tempfile::tempdir().unwrap();
    let dir = certs.path();
    if pg::test_certificates(dir).is_none() {
        return;
    }
    let Some(cluster) = pg::Cluster::start_tls(dir) else {
        return;
    };
    let ca = dir.join("ca.crt");
    let url = format!("{}?sslmode=require", cluster.url);

    // Verified against the CA that signed the server: it works.
    let j = PgJournal::open(&url, with_ca(&ca)).await.unwrap();
    assert_eq!(j.mint_fence("s", 1, None).await.unwrap(), 1);
    // A CA alone is enough: it raises the URL's default `prefer` to require.
    PgJournal::open(&cluster.url, with_ca(&ca)).await.unwrap();
    // The offline tools speak TLS too.
    Side::target(&url, Some(&ca)).await.unwrap();

    // In the clear: the server turns the connection away.
    let plain = PgJournal::open(&cluster.url, PgOptions::default()).await;
    assert!(plain.is_err(), "a plain connection to a TLS-only server");

    // A server whose certificate another CA signed is not trusted.
    let other = PgJournal::open(&url, with_ca(&dir.join("other-ca.crt"))).await;
    let e = other.expect_err("a certificate from an unknown CA");
    assert!(e.to_string().contains("certificate"), "{e}");
}

#[tokio::test]
async fn tls_without_a_ca_or_against_sslmode_disable_is_a_clear_error() {
    // No server needed: these are refused before any connection.
    let e = PgJournal::open(
        "postgres://u@127.0.0.1:1/db?sslmode=require",
        PgOptions::default(),
    )
    .await
    .unwrap_err();
    assert!(
        matches!(&e, StoreError::InvalidArgument(m) if m.contains("--journal-ca")),
        "{e}"
    );
    let dir = tempfile::tempdir().unwrap();
    let ca = dir.path().join("ca.crt");
    std::fs::write(&ca, "not a certificate\n").unwrap();
    let e = PgJournal::open("postgres://u@127.0.0.1:1/db?sslmode=disable", with_ca(&ca))
        .await
        .unwrap_err();
    assert!(
        matches!(&e, StoreError::InvalidArgument(m) if m.contains("sslmode=disable")),
        "{e}"
    );
    let e = PgJournal::open("postgres://u@127.0.0.1:1/db", with_ca(&ca))
        .await
        .unwrap_err();
    assert!(
        matches!(&e, StoreError::InvalidArgument(m) if m.contains("no certificate")),
        "{e}"
    );
}
