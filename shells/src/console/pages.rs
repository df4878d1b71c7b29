//! The pages: the sessions list, a session, and its chain check.
//!
//! Invariant: a page is read only with the caller of a console session
//! that verifies now; any other request is sent to the login page with a
//! code ([`Notice`]), never with words of its own.

use agentsessions_machine::events::{body, kind_of};
use agentsessions_machine::vocab::{Caller, Request, Response, Status};
use agentsessions_proto::v1::{EventKind, ListSessionsRequest, LogRecord, Session};
use askama::Template;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode, Uri, header};
use axum::response::{IntoResponse, Redirect, Response as HttpResponse};

use super::auth::{self, Viewer};
use super::login::Notice;
use super::view::{self, RecordRow, SessionRow};
use super::{Console, Failure, Verdict, page};

/// Records per timeline page.
pub const TIMELINE_PAGE: i64 = 100;
/// Sessions per list page (rows shown), and per ListSessions page read.
const LIST_PAGE: usize = 50;
/// ListSessions pages read for one filtered list page at most; past it the
/// page ends early with a link onward.
const LIST_SCAN_PAGES: usize = 20;
/// Sessions scanned for a session's fork children at most.
const CHILD_SCAN_PAGES: usize = 4;
/// Ancestors shown above a session at most.
const MAX_ANCESTORS: usize = 8;
/// Sessions up to this many records have their chain verified on the
/// page itself; longer ones link to the check.
pub const INLINE_VERIFY: i64 = 2_000;
/// Records before an APPROVAL_REQUEST searched for its TOOL_CALL.
const CALL_WINDOW: i64 = 256;
/// Records of a receipt shown after the decision.
const RECEIPT_RECORDS: i64 = 30;

/// Percent-encodes a query value.
pub fn urlencode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// Sends the browser to the login page, forgetting a refused cookie.
pub struct ToLogin(String, bool);

impl IntoResponse for ToLogin {
    fn into_response(self) -> HttpResponse {
        let to_login = (
            [(
                header::SET_COOKIE,
                auth::set_cookie(auth::COOKIE, "", "/", 0, self.1),
            )],
            Redirect::to(&self.0),
        )
            .into_response();
        // A redirect, but the action was refused for want of a viewer.
        super::access::with_code(
            to_login,
            agentsessions_machine::vocab::Code::Unauthenticated,
        )
    }
}

/// The viewer, or where the browser logs in first.
pub fn viewer_or_login(
    console: &Console,
    headers: &HeaderMap,
    uri: &Uri,
) -> Result<Viewer, ToLogin> {
    console.viewer(headers).map_err(|no| {
        let next = uri.path_and_query().map_or("/sessions", |p| p.as_str());
        let mut to = format!("/login?next={}", urlencode(next));
        // A code only: the login page shows its fixed message.
        if let Some(notice) = Notice::of(&no) {
            to.push_str(&format!("&error={}", notice.code()));
        }
        ToLogin(to, console.is_secure())
    })
}

/// The filters of the sessions list.
#[derive(Debug, Default, serde::Deserialize)]
pub struct ListQuery {
    #[serde(default)]
    project: String,
    #[serde(default)]
    harness: String,
    #[serde(default)]
    state: String,
    #[serde(default)]
    waiting: String,
    #[serde(default)]
    page_token: String,
}

impl ListQuery {
    fn keeps(&self, s: &Session, decided: bool) -> bool {
        (self.harness.is_empty() || s.harness == self.harness)
            && (self.state.is_empty() || view::shown_state(s, decided) == self.state)
            && (self.waiting.is_empty() || s.pending_approval.is_some() || decided)
    }

    /// The query string of this filter from `token` on.
    fn href(&self, token: &str) -> String {
        let mut q = vec![];
        for (k, v) in [
            ("project", &self.project),
            ("harness", &self.harness),
            ("state", &self.state),
            ("waiting", &self.waiting),
        ] {
            if !v.is_empty() {
                q.push(format!("{k}={}", urlencode(v)));
            }
        }
        if !token.is_empty() {
            q.push(format!("page_token={}", urlencode(token)));
        }
        format!("/sessions?{}", q.join("&"))
    }
}

#[derive(Template)]
#[template(path = "console/list.html")]
struct ListPage {
    viewer: String,
    csrf: String,
    rows: Vec<SessionRow>,
    project: String,
    harness: String,
    state: String,
    waiting: bool,
    states: &'static [&'static str],
    next: Option<String>,
    first: Option<String>,
    scanned: usize,
}

const STATES: &[&str] = &[
    "PENDING",
    "RUNNING",
    "AWAITING",
    view::DECIDED,
    "COMPLETED",
    "FAILED",
    "CANCELED",
];

/// GET /sessions: newest first, keyset-paged by ListSessions; the
/// harness, state and waiting filters keep rows of the pages read.
pub async fn list(
    State(console): State<Console>,
    headers: HeaderMap,
    uri: Uri,
    Query(q): Query<ListQuery>,
) -> HttpResponse {
    let viewer = match viewer_or_login(&console, &headers, &uri) {
        Ok(v) => v,
        Err(r) => return r.into_response(),
    };
    let mut rows = Vec::new();
    let mut token = q.page_token.clone();
    let mut scanned = 0;
    for _ in 0..LIST_SCAN_PAGES {
        let request = Request::ListSessions(ListSessionsRequest {
            project: q.project.clone(),
            page_size: LIST_PAGE as i32,
            page_token: token.clone(),
        });
        let page = match console.unary(&viewer.caller, request).await {
            Ok(Response::Sessions(p)) => p,
            Ok(other) => {
                return Failure::from(super::unexpected("ListSessions", &other)).into_response();
            }
            Err(s) => return with_viewer(Failure::from(s), &console, &viewer).into_response(),
        };
        scanned += page.sessions.len();
        for s in &page.sessions {
            let decided = match console.is_decided(&viewer.caller, s).await {
                Ok(d) => d,
                Err(st) => {
                    return with_viewer(Failure::from(st), &console, &viewer).into_response();
                }
            };
            if q.keeps(s, decided) {
                rows.push(SessionRow::of(s, decided));
            }
        }
        token = page.next_page_token;
        if token.is_empty() || rows.len() >= LIST_PAGE {
            break;
        }
    }
    let template = ListPage {
        viewer: viewer.name(),
        csrf: console.csrf().token_for(&viewer.session),
        rows,
        project: q.project.clone(),
        harness: q.harness.clone(),
        state: q.state.clone(),
        waiting: !q.waiting.is_empty(),
        states: STATES,
        next: (!token.is_empty()).then(|| q.href(&token)),
        first: (!q.page_token.is_empty()).then(|| q.href("")),
        scanned,
    };
    page(StatusCode::OK, &template)
}

fn with_viewer(mut f: Failure, console: &Console, viewer: &Viewer) -> Failure {
    f.viewer = viewer.name();
    f.csrf = console.csrf().token_for(&viewer.session);
    f
}

/// What the session page is asked to show besides the session.
#[derive(Debug, Default, serde::Deserialize)]
pub struct SessionQuery {
    /// First seq of the timeline page (default: the last page).
    from: Option<i64>,
    /// A decision this browser just committed, at this seq.
    receipt: Option<i64>,
    /// A decision this browser tried on the request at this seq, which
    /// another decision had won.
    stale: Option<i64>,
    /// The call of `stale`.
    #[serde(default)]
    call: String,
    /// The status code of a resume that failed after `receipt`'s decision.
    resume: Option<i32>,
}

/// The approval a parked turn waits for.
pub struct PendingCard {
    pub execution_id: String,
    pub call_id: String,
    pub request_seq: i64,
    pub tool: String,
    pub args: String,
    pub reason: String,
    /// The catalog's word on the tool: its server, the policy that gated
    /// it and its hints ("" for a tool the host keeps no catalog of).
    pub policy: String,
}

/// A fork relative.
pub struct Relative {
    pub uid: String,
    pub name: String,
    pub fork_seq: i64,
}

#[derive(Template)]
#[template(path = "console/session.html")]
struct SessionPage {
    viewer: String,
    csrf: String,
    uid: String,
    name: String,
    project: String,
    harness: String,
    model: String,
    exec: &'static str,
    compute: &'static str,
    last_seq: i64,
    created: String,
    updated: String,
    creator: String,
    ancestors: Vec<Relative>,
    fork_seq: i64,
    children: Vec<Relative>,
    children_truncated: bool,
    verified: Option<bool>,
    verify_text: String,
    rows: Vec<RecordRow>,
    from: i64,
    to: i64,
    older: Option<i64>,
    newer: Option<i64>,
    latest: bool,
    pending: Option<PendingCard>,
    may_decide: bool,
    /// The session's approval is decided and its tool has not run yet.
    decided: bool,
    /// Whether to offer Resume for a decided approval.
    may_resume: bool,
    receipt: Vec<RecordRow>,
    receipt_seq: i64,
    stale: Option<RecordRow>,
    stale_seq: i64,
    note: String,
}

/// GET /sessions/{uid}: the session, its fork tree, a page of its
/// timeline, its pending approval and its chain check.
pub async fn session(
    State(console): State<Console>,
    headers: HeaderMap,
    uri: Uri,
    Path(uid): Path<String>,
    Query(q): Query<SessionQuery>,
) -> HttpResponse {
    let viewer = match viewer_or_login(&console, &headers, &uri) {
        Ok(v) => v,
        Err(r) => return r.into_response(),
    };
    match session_page(&console, &viewer, &uid, &q).await {
        Ok(p) => page(StatusCode::OK, &p),
        Err(s) => with_viewer(Failure::from(s), &console, &viewer).into_response(),
    }
}

async fn session_page(
    console: &Console,
    viewer: &Viewer,
    uid: &str,
    q: &SessionQuery,
) -> Result<SessionPage, Status> {
    let caller = &viewer.caller;
    let s = console.get_session(caller, uid).await?;
    let meta = s.metadata.clone().unwrap_or_default();
    let last = s.last_seq;
    let from = q
        .from
        .unwrap_or(last - TIMELINE_PAGE + 1)
        .clamp(1, last.max(1));
    let to = (from + TIMELINE_PAGE - 1).min(last);
    let rows = if last > 0 {
        console
            .replay(caller, uid, from, to, TIMELINE_PAGE as usize)
            .await?
    } else {
        Vec::new()
    };
    let (verified, verify_text) = if last <= INLINE_VERIFY {
        verdict(console.verify_chain(caller, &s).await?)
    } else {
        (None, String::new())
    };
    let pending = match &s.pending_approval {
        Some(p) => Some(pending_card(console, caller, uid, p).await?),
        None => None,
    };
    let decided = console.is_decided(caller, &s).await?;
    let (receipt, receipt_seq) = match q.receipt {
        Some(seq) if seq > 0 && seq <= last => {
            let end = (seq + RECEIPT_RECORDS - 1).min(last);
            let records = console
                .replay(caller, uid, seq, end, RECEIPT_RECORDS as usize)
                .await?;
            (records.iter().map(RecordRow::of).collect(), seq)
        }
        _ => (Vec::new(), 0),
    };
    let (stale, stale_seq) = match q.stale {
        Some(seq) if seq > 0 => (
            winning_decision(console, caller, uid, seq, &q.call, last).await?,
            seq,
        ),
        _ => (None, 0),
    };
    let (ancestors, children, children_truncated) = lineage(console, caller, &s).await?;
    Ok(SessionPage {
        viewer: viewer.name(),
        csrf: console.csrf().token_for(&viewer.session),
        uid: meta.uid.clone(),
        name: meta.name.clone(),
        project: meta.project.clone(),
        harness: s.harness.clone(),
        model: s.model.clone(),
        exec: view::shown_state(&s, decided),
        compute: view::compute(&s),
        last_seq: last,
        created: meta
            .create_time
            .as_ref()
            .map(view::time)
            .unwrap_or_default(),
        updated: meta
            .update_time
            .as_ref()
            .map(view::time)
            .unwrap_or_default(),
        creator: view::actor(s.identity.as_ref()),
        ancestors,
        fork_seq: s.fork_seq,
        children,
        children_truncated,
        verified,
        verify_text,
        rows: rows.iter().map(RecordRow::of).collect(),
        from,
        to,
        older: (from > 1).then(|| (from - TIMELINE_PAGE).max(1)),
        newer: (to < last).then_some(to + 1),
        latest: to >= last,
        may_decide: viewer.may_decide(&meta.project),
        decided,
        may_resume: viewer.may_resume(&meta.project),
        pending,
        receipt,
        receipt_seq,
        stale,
        stale_seq,
        note: q.resume.map_or(String::new(), resume_note),
    })
}

/// What the page says when the resume after a decision failed with the
/// status `code`: fixed texts only (the URL carries just the code).
fn resume_note(code: i32) -> String {
    let why = match code {
        7 => "this principal may not resume this session",
        9 | 10 => "the session was busy or changed meanwhile",
        14 => "the host was unavailable",
        _ => "the resume failed",
    };
    format!(
        "The decision was committed, but the session was not resumed: {why}. A writer can \
         resume it (`agentctl resume`), and so can an approver of its project."
    )
}

fn verdict(v: Verdict) -> (Option<bool>, String) {
    match v {
        Verdict::Verified(n) => (Some(true), format!("chain verified ({n} records)")),
        Verdict::Broken { seq, error } => (Some(false), format!("seq {seq}: {error}")),
    }
}

/// The pending approval with its call and arguments, read from the
/// records before its APPROVAL_REQUEST.
async fn pending_card(
    console: &Console,
    caller: &Caller,
    uid: &str,
    p: &agentsessions_proto::v1::ApprovalRef,
) -> Result<PendingCard, Status> {
    let from = (p.request_seq - CALL_WINDOW).max(1);
    let window = console
        .replay(caller, uid, from, p.request_seq, CALL_WINDOW as usize + 1)
        .await?;
    let mut card = PendingCard {
        execution_id: p.execution_id.clone(),
        call_id: p.tool_call_id.clone(),
        request_seq: p.request_seq,
        tool: String::new(),
        args: String::new(),
        reason: String::new(),
        policy: String::new(),
    };
    for r in &window {
        let Some(ev) = r.event.as_ref() else { continue };
        if ev.execution_id != p.execution_id {
            continue;
        }
        match kind_of(ev) {
            EventKind::EventToolCall => {
                if let Some(t) = body::tool(ev).filter(|t| t.id == p.tool_call_id) {
                    card.tool = t.tool.clone();
                    card.args = t.args.as_ref().map_or_else(|| "{}".into(), view::pretty);
                }
            }
            EventKind::EventApprovalRequest if r.seq == p.request_seq => {
                if let Some(a) = body::approval(ev) {
                    card.reason = a.reason.clone();
                }
            }
            _ => {}
        }
    }
    if let Ok(Response::Tools(listing)) = console.unary(caller, Request::ListTools).await
        && let Some(t) = listing.tools.iter().find(|t| t.name == card.tool)
    {
        card.policy = view::catalog_line(t);
    }
    Ok(card)
}

/// Records read at most looking for the decision that won.
const STALE_SCAN: usize = 10_000;

/// The APPROVAL_RESULT deciding the request at `request_seq`, if any.
async fn winning_decision(
    console: &Console,
    caller: &Caller,
    uid: &str,
    request_seq: i64,
    call: &str,
    last: i64,
) -> Result<Option<RecordRow>, Status> {
    if request_seq >= last {
        return Ok(None);
    }
    let records = console
        .replay(caller, uid, request_seq + 1, last, STALE_SCAN)
        .await?;
    Ok(records
        .iter()
        .find(|r| is_decision_of(r, request_seq, call))
        .map(RecordRow::of))
}

fn is_decision_of(r: &LogRecord, request_seq: i64, call: &str) -> bool {
    r.event
        .as_ref()
        .and_then(body::approval_result)
        .is_some_and(|a| a.request_seq == request_seq && a.tool_call_id == call)
}

/// The session's ancestors (root first) and its children, scanned from
/// the first sessions of its project.
async fn lineage(
    console: &Console,
    caller: &Caller,
    s: &Session,
) -> Result<(Vec<Relative>, Vec<Relative>, bool), Status> {
    let mut ancestors = Vec::new();
    let mut parent = s.parent_uid.clone();
    let mut fork_seq = s.fork_seq;
    while !parent.is_empty() && ancestors.len() < MAX_ANCESTORS {
        let p = match console.get_session(caller, &parent).await {
            Ok(p) => p,
            // A deleted parent is still named, without a link onward.
            Err(_) => {
                ancestors.push(Relative {
                    uid: parent.clone(),
                    name: String::new(),
                    fork_seq,
                });
                break;
            }
        };
        ancestors.push(Relative {
            uid: parent.clone(),
            name: p
                .metadata
                .as_ref()
                .map_or(String::new(), |m| m.name.clone()),
            fork_seq,
        });
        parent = p.parent_uid.clone();
        fork_seq = p.fork_seq;
    }
    ancestors.reverse();
    let meta = s.metadata.clone().unwrap_or_default();
    let mut children = Vec::new();
    let mut token = String::new();
    let mut truncated = false;
    for i in 0..CHILD_SCAN_PAGES {
        let request = Request::ListSessions(ListSessionsRequest {
            project: meta.project.clone(),
            page_size: agentsessions_machine::vocab::config::MAX_PAGE_SIZE as i32,
            page_token: std::mem::take(&mut token),
        });
        let page = match console.unary(caller, request).await? {
            Response::Sessions(p) => p,
            other => return Err(super::unexpected("ListSessions", &other)),
        };
        children.extend(
            page.sessions
                .iter()
                .filter(|c| c.parent_uid == meta.uid)
                .map(|c| Relative {
                    uid: c.metadata.as_ref().map_or(String::new(), |m| m.uid.clone()),
                    name: c
                        .metadata
                        .as_ref()
                        .map_or(String::new(), |m| m.name.clone()),
                    fork_seq: c.fork_seq,
                }),
        );
        token = page.next_page_token;
        if token.is_empty() {
            break;
        }
        truncated = i + 1 == CHILD_SCAN_PAGES;
    }
    children.sort_by_key(|c| c.fork_seq);
    Ok((ancestors, children, truncated))
}

#[derive(Template)]
#[template(path = "console/verify.html")]
struct VerifyPage {
    viewer: String,
    csrf: String,
    uid: String,
    verified: bool,
    text: String,
}

/// GET /sessions/{uid}/verify: `agentctl verify` for any length.
pub async fn verify(
    State(console): State<Console>,
    headers: HeaderMap,
    uri: Uri,
    Path(uid): Path<String>,
) -> HttpResponse {
    let viewer = match viewer_or_login(&console, &headers, &uri) {
        Ok(v) => v,
        Err(r) => return r.into_response(),
    };
    let result = async {
        let s = console.get_session(&viewer.caller, &uid).await?;
        console.verify_chain(&viewer.caller, &s).await
    }
    .await;
    match result {
        Ok(v) => {
            let (verified, text) = verdict(v);
            let template = VerifyPage {
                viewer: viewer.name(),
                csrf: console.csrf().token_for(&viewer.session),
                uid,
                verified: verified == Some(true),
                text,
            };
            page(StatusCode::OK, &template)
        }
        Err(s) => with_viewer(Failure::from(s), &console, &viewer).into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query_values_are_percent_encoded() {
        assert_eq!(urlencode("a b&c=/é"), "a%20b%26c%3D%2F%C3%A9");
        assert_eq!(urlencode("sess-01_x.~"), "sess-01_x.~");
    }
}
