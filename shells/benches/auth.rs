//! What TLS and authentication cost a turn
//! (`cargo bench -p agentsessions-shells --bench auth`).
//!
//! Three daemons in one run, each on its own SQLite journal in the same
//! directory: one plaintext without `--auth` (the baseline), one serving
//! TLS (rustls, ECDSA P-256 certificate) with a JWT-verifying `--auth`
//! (ES256 against a JWKS file, a role per project), and one serving the
//! same TLS without auth, to split the cost between the two. The clients are tonic
//! over loopback; the TLS client verifies the server and sends a bearer JWT
//! on every call.
//!
//! 1. One session on each, echo turns awaited one at a time, in alternating
//!    blocks so disk noise hits both alike: turn p50 and p99, and the ratio
//!    TLS+JWT / plaintext.
//! 2. 64 sessions on each (one after the other), turns back to back for a
//!    fixed time: turns per second and the ratio.
//!
//! `AUTH_BENCH_SCALE` (default 1.0) scales turn counts and durations.

#[path = "../tests/support/daemon.rs"]
mod support;

#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::sync::Arc;
use std::time::{Duration, Instant};

use agentsessions_proto::grpc::sessions_client::SessionsClient;
use agentsessions_proto::v1::ExecRequest;
use agentsessions_shells::auth::{AuthFile, Authenticator};
use agentsessions_shells::daemon::app::{Daemon, DaemonConfig};
use agentsessions_shells::daemon::security::{Security, TlsFiles};
use base64::Engine as _;
use tonic::service::Interceptor;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::{Certificate, Channel, ClientTlsConfig};

type Client = SessionsClient<InterceptedService<Channel, Bearer>>;

#[derive(Clone)]
struct Bearer(Option<tonic::metadata::MetadataValue<tonic::metadata::Ascii>>);

impl Interceptor for Bearer {
    fn call(&mut self, mut r: tonic::Request<()>) -> Result<tonic::Request<()>, tonic::Status> {
        if let Some(v) = &self.0 {
            r.metadata_mut().insert("authorization", v.clone());
        }
        Ok(r)
    }
}

fn scale() -> f64 {
    std::env::var("AUTH_BENCH_SCALE")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1.0)
}

fn pct(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

/// How a client reaches one daemon.
#[derive(Clone)]
struct Dial {
    uri: String,
    tls: Option<ClientTlsConfig>,
    bearer: Bearer,
}

impl Dial {
    async fn connect(&self) -> Client {
        let mut endpoint = Channel::from_shared(self.uri.clone())
            .unwrap()
            .tcp_nodelay(true);
        if let Some(tls) = &self.tls {
            endpoint = endpoint.tls_config(tls.clone()).unwrap();
        }
        let channel = endpoint.connect().await.unwrap();
        SessionsClient::with_interceptor(channel, self.bearer.clone())
    }
}

async fn create(c: &mut Client) -> String {
    let s = c
        .create_session(agentsessions_proto::v1::CreateSessionRequest {
            session: Some(agentsessions_proto::v1::Session {
                harness: "echo".into(),
                ..Default::default()
            }),
        })
        .await
        .unwrap()
        .into_inner();
    s.metadata.unwrap().uid
}

async fn turn(c: &mut Client, session: &str) -> Duration {
    let t = Instant::now();
    let mut stream = c
        .exec(ExecRequest {
            session: session.into(),
            inputs: vec![support::text("hello")],
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let mut frames = 0;
    while stream.message().await.unwrap().is_some() {
        frames += 1;
    }
    assert!(
        frames >= 6,
        "an echo turn streams its session and 5 records"
    );
    t.elapsed()
}

/// A CA, a server certificate for 127.0.0.1, an ES256 signing key with its
/// JWKS file, and the `--auth` file; returns the TLS files, the client TLS
/// settings and a bearer JWT.
fn secure_setup(dir: &std::path::Path) -> (Security, ClientTlsConfig, String) {
    use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};
    let ca_key = KeyPair::generate().unwrap();
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca_pem = ca_params.self_signed(&ca_key).unwrap().pem();
    let issuer = Issuer::new(ca_params, ca_key);
    let key = KeyPair::generate().unwrap();
    let cert = CertificateParams::new(vec!["127.0.0.1".to_owned()])
        .unwrap()
        .signed_by(&key, &issuer)
        .unwrap();
    std::fs::write(dir.join("server.pem"), cert.pem()).unwrap();
    std::fs::write(dir.join("server.key"), key.serialize_pem()).unwrap();

    let signer = KeyPair::generate().unwrap();
    let raw = signer.public_key_raw();
    let b64 = |b: &[u8]| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(b);
    let jwks = serde_json::json!({"keys": [{"kty": "EC", "crv": "P-256", "kid": "k1",
        "alg": "ES256", "x": b64(&raw[1..33]), "y": b64(&raw[33..65])}]});
    std::fs::write(dir.join("jwks.json"), jwks.to_string()).unwrap();
    std::fs::write(
        dir.join("auth.toml"),
        "[jwt]\nissuer = \"https://issuer.bench\"\naudience = \"agentsessions\"\n\
         jwks_file = \"jwks.json\"\n",
    )
    .unwrap();
    let file = AuthFile::load(&dir.join("auth.toml")).unwrap();
    let auth = Authenticator::from_file(&file).unwrap();

    let mut header = jsonwebtoken::Header::new(jsonwebtoken::Algorithm::ES256);
    header.kid = Some("k1".into());
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let claims = serde_json::json!({"iss": "https://issuer.bench", "aud": "agentsessions",
        "sub": "bench", "exp": now + 3600, "agentsessions_roles": ["default:writer"]});
    let signing = jsonwebtoken::EncodingKey::from_ec_der(&signer.serialize_der());
    let token = jsonwebtoken::encode(&header, &claims, &signing).unwrap();

    let security = Security {
        auth: Arc::new(auth),
        tls: Some(TlsFiles {
            cert: dir.join("server.pem"),
            key: dir.join("server.key"),
            client_ca: None,
        }),
        ..Security::default()
    };
    let tls = ClientTlsConfig::new().ca_certificate(Certificate::from_pem(ca_pem));
    (security, tls, token)
}

struct Figures {
    p50: Duration,
    p99: Duration,
}

fn figures(mut lat: Vec<Duration>) -> Figures {
    lat.sort();
    Figures {
        p50: pct(&lat, 0.5),
        p99: pct(&lat, 0.99),
    }
}

/// Turns per second over 64 sessions for `secs`.
async fn concurrent(dial: &Dial, sessions: usize, secs: f64) -> f64 {
    let mut clients = Vec::new();
    for _ in 0..sessions.div_ceil(16) {
        clients.push(dial.connect().await);
    }
    let start = Instant::now() + Duration::from_millis(300);
    let stop = start + Duration::from_secs_f64(secs);
    let mut tasks = Vec::new();
    for i in 0..sessions {
        let mut c = clients[i / 16].clone();
        tasks.push(tokio::spawn(async move {
            let session = create(&mut c).await;
            turn(&mut c, &session).await;
            tokio::time::sleep_until(start.into()).await;
            let mut n = 0usize;
            while Instant::now() < stop {
                turn(&mut c, &session).await;
                n += 1;
            }
            n
        }));
    }
    let mut n = 0;
    for t in tasks {
        n += t.await.unwrap();
    }
    n as f64
        / Instant::now()
            .saturating_duration_since(start)
            .as_secs_f64()
}

fn main() {
    let dir = tempfile::tempdir().unwrap();
    let (plain_dir, secure_dir) = (dir.path().join("plain"), dir.path().join("secure"));
    std::fs::create_dir_all(&plain_dir).unwrap();
    std::fs::create_dir_all(&secure_dir).unwrap();
    let (security, tls, token) = secure_setup(&secure_dir);
    // The daemons share one runtime, as each daemon has one; the clients
    // run on a runtime of their own.
    let server = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let tls_dir = dir.path().join("tls");
    std::fs::create_dir_all(&tls_dir).unwrap();
    let tls_only = Security {
        tls: security.tls.clone(),
        ..Security::default()
    };
    let (plain, secure, tls_daemon) = server.block_on(async {
        let plain = Daemon::start(support::config(&plain_dir)).await.unwrap();
        let secure = Daemon::start(DaemonConfig {
            security,
            ..support::config(&secure_dir)
        })
        .await
        .unwrap();
        let tls_daemon = Daemon::start(DaemonConfig {
            security: tls_only,
            ..support::config(&tls_dir)
        })
        .await
        .unwrap();
        (plain, secure, tls_daemon)
    });
    let dials = [
        Dial {
            uri: format!("http://{}", plain.addr),
            tls: None,
            bearer: Bearer(None),
        },
        Dial {
            uri: format!("https://{}", secure.addr),
            tls: Some(tls.clone()),
            bearer: Bearer(Some(format!("Bearer {token}").parse().unwrap())),
        },
        Dial {
            uri: format!("https://{}", tls_daemon.addr),
            tls: Some(tls),
            bearer: Bearer(None),
        },
    ];
    let serving = std::thread::spawn(move || {
        server.block_on(async {
            tokio::time::sleep(Duration::from_secs(3600)).await;
        })
    });
    let _ = serving;
    let clients = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let blocks = ((20.0 * scale()) as usize).max(2);
    let per_block = 25;
    let (single, rates) = clients.block_on(async {
        let mut conns = Vec::new();
        for d in &dials {
            let mut c = d.connect().await;
            let s = create(&mut c).await;
            turn(&mut c, &s).await;
            conns.push((c, s));
        }
        let mut lat = [Vec::new(), Vec::new(), Vec::new()];
        for b in 0..blocks {
            // Rotate which goes first, so none always follows another.
            for k in [b % 3, (b + 1) % 3, (b + 2) % 3] {
                let (c, s) = &mut conns[k];
                for _ in 0..per_block {
                    lat[k].push(turn(c, s).await);
                }
            }
        }
        let secs = 4.0 * scale();
        let mut rates = [0.0; 3];
        for (k, d) in dials.iter().enumerate() {
            rates[k] = concurrent(d, 64, secs).await;
        }
        (lat.map(figures), rates)
    });
    let [p, s, t] = &single;
    println!("## TLS + JWT auth vs plaintext without auth (one run)");
    println!();
    println!("| | turn p50 µs | turn p99 µs | 64 sessions, turns/s |");
    println!("| --- | --- | --- | --- |");
    println!(
        "| plaintext, no auth | {:.0} | {:.0} | {:.1} |",
        us(p.p50),
        us(p.p99),
        rates[0]
    );
    println!(
        "| TLS + JWT (ES256) | {:.0} | {:.0} | {:.1} |",
        us(s.p50),
        us(s.p99),
        rates[1]
    );
    println!(
        "| TLS, no auth | {:.0} | {:.0} | {:.1} |",
        us(t.p50),
        us(t.p99),
        rates[2]
    );
    println!();
    println!(
        "turn p50 ratio (TLS+JWT / plaintext): {:.3}x (goal <= 1.1x); 64-session throughput ratio: {:.3}x",
        us(s.p50) / us(p.p50),
        rates[1] / rates[0]
    );
    println!(
        "TLS alone: turn p50 {:.3}x, throughput {:.3}x",
        us(t.p50) / us(p.p50),
        rates[2] / rates[0]
    );
    std::process::exit(0);
}
