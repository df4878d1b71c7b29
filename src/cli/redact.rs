//! Secrets out of the values `agentsessionsd --print-config` prints.
//!
//! Invariant: a value the journal would hand to tokio-postgres is printed
//! only as rebuilt from what tokio-postgres' own parser read from it, with
//! the password (wherever it was given) replaced by [`REDACTED`]; one that
//! looks like a connection config but does not parse prints as
//! [`UNPARSABLE`]. The printed text is never a cut of the input, so no
//! password form the parser accepts (userinfo up to the first `@` whatever
//! it holds, percent-encoded parameter names, key/value strings) can
//! reach the output.

use std::fmt::Write as _;
use std::str::FromStr as _;

use tokio_postgres::Config;
use tokio_postgres::config::{
    ChannelBinding, Host, LoadBalanceHosts, SslMode, SslNegotiation, TargetSessionAttrs,
};

/// What replaces a secret.
pub const REDACTED: &str = "REDACTED";

/// What a connection config that does not parse prints as: its text is
/// unknown territory, so none of it is shown.
pub const UNPARSABLE: &str = "<unparsable, redacted>";

/// `value` with every password in it replaced by [`REDACTED`]: a
/// PostgreSQL URL or key/value string through tokio-postgres (see the
/// module docs), another URL's userinfo password by position.
pub fn redact(value: &str) -> String {
    // The daemon's own test for a PostgreSQL journal (and the parser's).
    if value.starts_with("postgres://") || value.starts_with("postgresql://") {
        return Config::from_str(value)
            .ok()
            .and_then(|c| url(&c))
            .unwrap_or_else(|| UNPARSABLE.to_owned());
    }
    if value.contains("://") {
        let shown = userinfo_redacted(value);
        // A query may carry one too; such URLs are not ours to parse.
        return if shown.to_ascii_lowercase().contains("password") {
            UNPARSABLE.to_owned()
        } else {
            shown
        };
    }
    if value.to_ascii_lowercase().contains("password") && value.contains('=') {
        // A key/value connection string (`host=db password=…`).
        return Config::from_str(value)
            .ok()
            .and_then(|c| key_values(&c))
            .unwrap_or_else(|| UNPARSABLE.to_owned());
    }
    value.to_owned()
}

/// A non-PostgreSQL URL with the password of its userinfo replaced.
fn userinfo_redacted(value: &str) -> String {
    let mut v = value.to_owned();
    if let Some(scheme_end) = v.find("://") {
        let rest = scheme_end + 3;
        let authority_end = v[rest..]
            .find(['/', '?', '#'])
            .map_or(v.len(), |i| rest + i);
        if let Some(at) = v[rest..authority_end].rfind('@')
            && let Some(colon) = v[rest..rest + at].find(':')
        {
            v.replace_range(rest + colon + 1..rest + at, REDACTED);
        }
    }
    v
}

/// `c` as a URL the same parser reads back to the same settings, the
/// password aside. None when a setting has a value this code cannot name
/// (a newer tokio-postgres), which prints as [`UNPARSABLE`].
fn url(c: &Config) -> Option<String> {
    let mut out = String::from("postgres://");
    let mut params = Vec::new();
    match (c.get_user(), c.get_password().is_some()) {
        (Some(user), true) => write!(out, "{}:{REDACTED}@", pct(user.as_bytes())).ok()?,
        (Some(user), false) => write!(out, "{}@", pct(user.as_bytes())).ok()?,
        (None, true) => params.push(("password", REDACTED.to_owned())),
        (None, false) => {}
    }
    let (hosts, ports) = (c.get_hosts(), c.get_ports());
    if hosts.len() == ports.len() {
        // The authority form: the parser pairs each host with its port.
        let pairs: Vec<String> = hosts
            .iter()
            .zip(ports)
            .map(|(h, p)| format!("{}:{p}", pct(&host_bytes(h))))
            .collect();
        out.push_str(&pairs.join(","));
    } else {
        for h in hosts {
            params.push(("host", String::from_utf8_lossy(&host_bytes(h)).into_owned()));
        }
        if !ports.is_empty() {
            params.push(("port", join(ports)));
        }
    }
    out.push('/');
    if let Some(db) = c.get_dbname() {
        out.push_str(&pct(db.as_bytes()));
    }
    params.extend(settings(c)?);
    let query: Vec<String> = params
        .iter()
        .map(|(k, v)| format!("{k}={}", pct(v.as_bytes())))
        .collect();
    if !query.is_empty() {
        write!(out, "?{}", query.join("&")).ok()?;
    }
    Some(out)
}

/// `c` as a key/value connection string, the password replaced.
fn key_values(c: &Config) -> Option<String> {
    let mut pairs = Vec::new();
    if let Some(user) = c.get_user() {
        pairs.push(("user", user.to_owned()));
    }
    if c.get_password().is_some() {
        pairs.push(("password", REDACTED.to_owned()));
    }
    if let Some(db) = c.get_dbname() {
        pairs.push(("dbname", db.to_owned()));
    }
    let hosts: Vec<String> = c
        .get_hosts()
        .iter()
        .map(|h| String::from_utf8_lossy(&host_bytes(h)).into_owned())
        .collect();
    if !hosts.is_empty() {
        pairs.push(("host", hosts.join(",")));
    }
    if !c.get_ports().is_empty() {
        pairs.push(("port", join(c.get_ports())));
    }
    pairs.extend(settings(c)?);
    let text: Vec<String> = pairs
        .iter()
        .map(|(k, v)| format!("{k}={}", quoted(v)))
        .collect();
    Some(text.join(" "))
}

/// Every setting but the credentials, hosts, ports and database, where it
/// differs from tokio-postgres' default.
fn settings(c: &Config) -> Option<Vec<(&'static str, String)>> {
    let d = Config::new();
    let mut out: Vec<(&'static str, String)> = Vec::new();
    let secs = |t: &std::time::Duration| t.as_secs().to_string();
    if let Some(o) = c.get_options() {
        out.push(("options", o.to_owned()));
    }
    if let Some(a) = c.get_application_name() {
        out.push(("application_name", a.to_owned()));
    }
    if c.get_ssl_mode() != d.get_ssl_mode() {
        let mode = match c.get_ssl_mode() {
            SslMode::Disable => "disable",
            SslMode::Prefer => "prefer",
            SslMode::Require => "require",
            _ => return None,
        };
        out.push(("sslmode", mode.to_owned()));
    }
    if c.get_ssl_negotiation() != d.get_ssl_negotiation() {
        let mode = match c.get_ssl_negotiation() {
            SslNegotiation::Postgres => "postgres",
            SslNegotiation::Direct => "direct",
            _ => return None,
        };
        out.push(("sslnegotiation", mode.to_owned()));
    }
    if !c.get_hostaddrs().is_empty() {
        out.push(("hostaddr", join(c.get_hostaddrs())));
    }
    if let Some(t) = c.get_connect_timeout() {
        out.push(("connect_timeout", secs(t)));
    }
    if let Some(t) = c.get_tcp_user_timeout() {
        out.push(("tcp_user_timeout", secs(t)));
    }
    if !c.get_keepalives() {
        out.push(("keepalives", "0".to_owned()));
    }
    if c.get_keepalives_idle() != d.get_keepalives_idle() {
        out.push(("keepalives_idle", secs(&c.get_keepalives_idle())));
    }
    if let Some(t) = c.get_keepalives_interval() {
        out.push(("keepalives_interval", secs(&t)));
    }
    if let Some(n) = c.get_keepalives_retries() {
        out.push(("keepalives_retries", n.to_string()));
    }
    if c.get_target_session_attrs() != d.get_target_session_attrs() {
        let attrs = match c.get_target_session_attrs() {
            TargetSessionAttrs::Any => "any",
            TargetSessionAttrs::ReadWrite => "read-write",
            TargetSessionAttrs::ReadOnly => "read-only",
            _ => return None,
        };
        out.push(("target_session_attrs", attrs.to_owned()));
    }
    if c.get_channel_binding() != d.get_channel_binding() {
        let binding = match c.get_channel_binding() {
            ChannelBinding::Disable => "disable",
            ChannelBinding::Prefer => "prefer",
            ChannelBinding::Require => "require",
            _ => return None,
        };
        out.push(("channel_binding", binding.to_owned()));
    }
    if c.get_load_balance_hosts() != d.get_load_balance_hosts() {
        let balance = match c.get_load_balance_hosts() {
            LoadBalanceHosts::Disable => "disable",
            LoadBalanceHosts::Random => "random",
            _ => return None,
        };
        out.push(("load_balance_hosts", balance.to_owned()));
    }
    Some(out)
}

fn host_bytes(h: &Host) -> Vec<u8> {
    match h {
        Host::Tcp(name) => name.as_bytes().to_vec(),
        #[cfg(unix)]
        Host::Unix(path) => path.as_os_str().as_encoded_bytes().to_vec(),
    }
}

fn join<T: ToString>(items: &[T]) -> String {
    let items: Vec<String> = items.iter().map(T::to_string).collect();
    items.join(",")
}

/// Percent-encodes every byte but RFC 3986's unreserved ones, so no byte
/// of a value can end the part of the URL it is in.
fn pct(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len());
    for &b in bytes {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(b));
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
    out
}

/// A key/value string's value: bare when it can be, else single-quoted
/// with `'` and `\` escaped, as the parser reads them.
fn quoted(v: &str) -> String {
    let bare = !v.is_empty()
        && !v
            .chars()
            .any(|c| c.is_whitespace() || matches!(c, '\'' | '\\' | '='));
    if bare {
        return v.to_owned();
    }
    let mut out = String::from("'");
    for c in v.chars() {
        if matches!(c, '\'' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out.push('\'');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECRET: &str = "hunter2";

    /// Every password form tokio-postgres accepts, and the ones the old
    /// redactor printed: none may show its secret.
    #[test]
    fn no_password_form_the_parser_accepts_prints_its_secret() {
        for (value, secret) in [
            ("postgres://u:s3/cretB@db/x", "cretB"),
            ("postgres://u:s3#cretB@db/x", "cretB"),
            ("postgres://u:s3?cretB@db/x", "cretB"),
            ("postgres://u:s3@cretB@db/x", "s3@"),
            ("postgresql://u:hunter2@db:5433/x", SECRET),
            ("postgres://u@db/x?pass%77ord=hunter2", SECRET),
            ("postgres://u@db/x?%70assword=hunter2", SECRET),
            ("postgres://u@db/x?sslpassword=a&password=hunter2", SECRET),
            ("postgres://u@db/x?sslmode=require&password=hunter2", SECRET),
            ("postgres://u:%68unter2@db/x", "unter2"),
            ("postgres://u:hunter2@db/x?password=hunter2", SECRET),
            ("postgres://db/x?user=u&password=hunter2", SECRET),
            ("host=db user=u password=hunter2 dbname=x", SECRET),
            ("host=db user=u password='hunter2 x' dbname=x", SECRET),
            ("host=db password = hunter2", SECRET),
            ("host=db PASSWORD=hunter2", SECRET),
            ("postgres://u:hunter2@[db/x", SECRET),
        ] {
            let shown = redact(value);
            assert!(!shown.contains(secret), "{value:?} printed {shown:?}");
            assert!(!shown.contains("s3"), "{value:?} printed {shown:?}");
        }
    }

    #[test]
    fn a_parsed_url_is_rebuilt_with_the_password_replaced_and_the_rest_kept() {
        for (value, want) in [
            (
                "postgres://app:s3cret@db:5432/as?sslmode=require",
                "postgres://app:REDACTED@db:5432/as?sslmode=require",
            ),
            ("postgres://app@db/as", "postgres://app@db:5432/as"),
            (
                "postgres://u:s3/cretB@db/x",
                "postgres://u:REDACTED@db:5432/x",
            ),
            (
                "postgres://u@db/x?pass%77ord=hunter2",
                "postgres://u:REDACTED@db:5432/x",
            ),
            (
                "postgres://db/as?user=a&password=x&sslmode=disable",
                "postgres://a:REDACTED@db:5432/as?sslmode=disable",
            ),
            (
                "postgres:///as?host=%2Frun%2Fpg&password=x&application_name=agent%20s",
                "postgres:///as?password=REDACTED&host=%2Frun%2Fpg&application_name=agent%20s",
            ),
            (
                "postgres://a@h1:1,h2:2/d?connect_timeout=5&target_session_attrs=read-write",
                "postgres://a@h1:1,h2:2/d?connect_timeout=5&target_session_attrs=read-write",
            ),
        ] {
            assert_eq!(redact(value), want, "{value}");
        }
    }

    #[test]
    fn what_is_printed_parses_back_to_the_same_settings_but_the_password() {
        for value in [
            "postgres://app:s3cret@db.internal:5432/sessions?sslmode=require",
            "postgres://u:p@[::1]:5433,db/x?keepalives=0&keepalives_idle=30&channel_binding=require",
            "postgres:///x?host=/run/pg&port=5433&user=u&password=p&options=-c%20a%3Db",
            "postgresql://u@db/x?load_balance_hosts=random&sslnegotiation=direct&sslmode=require",
        ] {
            let shown = redact(value);
            let (a, b) = (
                Config::from_str(value).unwrap(),
                Config::from_str(&shown).unwrap(),
            );
            let mut a = format!("{a:?}");
            let b = format!("{b:?}");
            // Debug shows the password only as set or not.
            a = a.replace("password: None", "password: Some(_)");
            assert_eq!(
                a,
                b.replace("password: None", "password: Some(_)"),
                "{shown}"
            );
            assert_eq!(redact(&shown), shown, "printing is stable");
        }
    }

    #[test]
    fn an_unparsable_connection_config_prints_none_of_itself() {
        assert_eq!(redact("postgres://u:pw@db/x?sslpassword=a"), UNPARSABLE);
        assert_eq!(redact("postgres://u:pw@db:port/x"), UNPARSABLE);
        assert_eq!(redact("host=db password='unterminated"), UNPARSABLE);
    }

    #[test]
    fn other_values_are_kept_and_other_urls_lose_only_their_password() {
        for v in ["agentsessions.db", "a=127.0.0.1:5000", "30d", "/etc/ca.pem"] {
            assert_eq!(redact(v), v);
        }
        assert_eq!(
            redact("https://u:tok3n@llm.internal/v1"),
            "https://u:REDACTED@llm.internal/v1"
        );
        assert_eq!(redact("https://llm.internal/v1?password=x"), UNPARSABLE);
    }

    #[test]
    fn key_value_strings_are_rebuilt_with_the_password_replaced() {
        assert_eq!(
            redact("host=db user=app password=s3cret dbname=as"),
            "user=app password=REDACTED dbname=as host=db"
        );
        assert_eq!(
            redact("host=db password='a b' application_name='x y'"),
            "password=REDACTED host=db application_name='x y'"
        );
    }
}
