//! Reading a child daemon's `/metrics` over plain HTTP/1.0 (no client
//! library between the test and the exposition).

#![allow(dead_code)]

use std::io::{Read as _, Write as _};

/// `GET path` on `addr`: (status, body).
pub fn http_get(addr: &str, path: &str) -> (u16, String) {
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    write!(s, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").unwrap();
    let mut raw = String::new();
    s.read_to_string(&mut raw).unwrap();
    let (head, body) = raw.split_once("\r\n\r\n").unwrap();
    let status = head.split(' ').nth(1).unwrap().parse().unwrap();
    (status, body.to_owned())
}

/// The body of a successful `GET /metrics`.
pub fn metrics(addr: &str) -> String {
    let (status, body) = http_get(addr, "/metrics");
    assert_eq!(status, 200, "{body}");
    body
}

/// The value of the sample line that starts with `series` (exactly).
pub fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}
