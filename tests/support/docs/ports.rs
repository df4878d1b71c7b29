//! Moving the loopback ports a block names to free ones. Invariant: a
//! port moves the same way everywhere in a block (commands, expected
//! output, bare uses of the number), and nothing that merely contains its
//! digits moves.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;

/// The hosts whose `:port` the test moves to a free port.
const HOSTS: [&str; 4] = ["127.0.0.1:", "localhost:", "0.0.0.0:", "[::1]:"];

/// The ports `text` names after a loopback (or any) address.
pub(crate) fn ports_in(text: &str) -> BTreeSet<u16> {
    let mut ports = BTreeSet::new();
    for host in HOSTS {
        for (at, _) in text.match_indices(host) {
            let digits: String = text[at + host.len()..]
                .chars()
                .take_while(char::is_ascii_digit)
                .collect();
            if let Ok(p) = digits.parse::<u16>()
                && p != 0
            {
                ports.insert(p);
            }
        }
    }
    ports
}

/// A loopback port nobody in this process was given before.
pub(super) fn free_port() -> u16 {
    static GIVEN: Mutex<BTreeSet<u16>> = Mutex::new(BTreeSet::new());
    loop {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free loopback port")
            .port();
        if GIVEN.lock().unwrap().insert(port) {
            return port;
        }
    }
}

/// `text` with every whole number that is a key of `map` replaced.
pub(crate) fn move_ports(text: &str, map: &BTreeMap<u16, u16>) -> String {
    let mut out = String::with_capacity(text.len());
    let bytes = text.as_bytes();
    let mut i = 0;
    while i < text.len() {
        if !bytes[i].is_ascii_digit() {
            let c = text[i..].chars().next().unwrap();
            out.push(c);
            i += c.len_utf8();
            continue;
        }
        let end = i + bytes[i..].iter().take_while(|b| b.is_ascii_digit()).count();
        let before = i.checked_sub(1).map(|j| bytes[j]);
        let after = bytes.get(end).copied();
        let joined = |b: Option<u8>| b.is_some_and(|b| b.is_ascii_alphanumeric() || b == b'_');
        let decimal = before == Some(b'.')
            || (after == Some(b'.') && bytes.get(end + 1).is_some_and(u8::is_ascii_digit));
        let number = &text[i..end];
        match number.parse::<u16>().ok().and_then(|p| map.get(&p)) {
            Some(to) if !joined(before) && !joined(after) && !decimal => {
                out.push_str(&to.to_string());
            }
            _ => out.push_str(number),
        }
        i = end;
    }
    out
}
