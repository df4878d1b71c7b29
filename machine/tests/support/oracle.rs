//! The reference path for canonical bytes: pbjson's generated proto3-JSON
//! serde for Event, into a `serde_json::Value`, then `serde_jcs`. Slow and
//! allocation-heavy, but independent of the fast writer in `canon`.

use agentsessions_proto::v1::Event;

#[derive(serde::Serialize)]
struct Envelope<'a> {
    event: &'a Event,
    prev_hash: &'a str,
    seq: String,
}

/// JCS(proto3-JSON(event)) by way of pbjson and serde_jcs.
pub fn event(ev: &Event) -> Result<Vec<u8>, String> {
    let v = serde_json::to_value(ev).map_err(|e| e.to_string())?;
    serde_jcs::to_vec(&v).map_err(|e| e.to_string())
}

/// The canonical record bytes by way of pbjson and serde_jcs.
pub fn record(prev_hash: &str, seq: i64, ev: &Event) -> Result<Vec<u8>, String> {
    let env = Envelope {
        event: ev,
        prev_hash,
        seq: seq.to_string(),
    };
    let v = serde_json::to_value(&env).map_err(|e| e.to_string())?;
    serde_jcs::to_vec(&v).map_err(|e| e.to_string())
}

/// Shows canonical bytes readably in assertion failures.
pub fn show(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}
