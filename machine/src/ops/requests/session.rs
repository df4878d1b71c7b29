//! CreateSession, GetSession and ListSessions.

use std::collections::BTreeMap;

use agentsessions_proto::v1::{
    CreateSessionRequest, IdentityRef, ListSessionsRequest, ListSessionsResponse, Session,
};
use base64::Engine as _;

use crate::ops::stages::cx::Cx;
use crate::ops::stages::flow::{Flow, unexpected};
use crate::ops::stages::present::{Render, Rendered};
use crate::ops::stages::render;
use crate::ops::stages::routing::{is_registered, resolve};
use crate::vocab::config::{DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE};
use crate::vocab::shown;
use crate::vocab::{
    Effect, EffectId, HarnessCheck, Nanos, Outcome, PutError, RegistryRefusal, RequestId, Response,
    SessionRow, Status, StoreEffect, StoreOutcome,
};

/// Maps a refused session insert to its status.
pub(crate) fn put_error(e: &PutError, harness: &str) -> Status {
    match e {
        PutError::Refused(RegistryRefusal::Retired) => Status::failed_precondition(format!(
            "harness {harness:?} is retired; it takes no new sessions, while existing sessions on it keep running"
        )),
        PutError::Refused(RegistryRefusal::NameCollision) => Status::failed_precondition(format!(
            "static harness {harness:?} collides with a registration row"
        )),
        PutError::Refused(other) => Status::internal(format!("create session: {other:?}")),
        PutError::Failed(f) => f.status("create session"),
    }
}

/// Builds the row of a new session and the registry check that must hold
/// when it is stored. Errors are the caller's (unknown harness, …).
pub(crate) fn new_row(
    cx: &mut Cx<'_>,
    uid: String,
    mut row: SessionRow,
) -> Result<(SessionRow, HarnessCheck), Status> {
    if row.project.is_empty() {
        row.project = cx.config().default_project.clone();
    }
    let (name, _) = resolve(cx, &row.harness)?;
    let check = if is_registered(cx, &name) {
        HarnessCheck::Registered
    } else {
        HarnessCheck::Static
    };
    row.harness = name;
    row.uid = uid;
    row.created_at = cx.now();
    row.updated_at = cx.now();
    row.last_seq = 0;
    assert!(!row.uid.is_empty(), "a new row has its uid");
    Ok((row, check))
}

/// CreateSession: store a row; nothing is journaled or provisioned.
pub(crate) struct CreateOp {
    request: RequestId,
    req: CreateSessionRequest,
    /// The verified creator, recorded as the session's identity in place
    /// of what the client wrote (none when auth is off).
    actor: Option<IdentityRef>,
    put: Option<(EffectId, SessionRow)>,
}

impl CreateOp {
    pub(crate) fn new(
        request: RequestId,
        req: CreateSessionRequest,
        actor: Option<IdentityRef>,
    ) -> Self {
        Self {
            request,
            req,
            actor,
            put: None,
        }
    }

    pub(crate) fn start(&mut self, cx: &mut Cx<'_>) -> Flow {
        let spec = self.req.session.take().unwrap_or_default();
        let meta = spec.metadata.unwrap_or_default();
        // Only these fields are the caller's; uid, states and lineage are
        // the server's.
        let row = SessionRow {
            project: meta.project,
            name: meta.name,
            harness: spec.harness,
            model: spec.model,
            labels: spec.labels,
            annotations: spec.annotations,
            origin: spec.origin,
            identity: self.actor.clone().or(spec.identity),
            ..SessionRow::default()
        };
        let uid = cx.ids().session_uid();
        match new_row(cx, uid, row) {
            Err(status) => {
                cx.reply(self.request, Err(status));
                Flow::Done
            }
            Ok((row, check)) => {
                let put_row = row.clone();
                let id = cx.put_session(put_row, Some(check));
                self.put = Some((id, row));
                Flow::Continue
            }
        }
    }

    pub(crate) fn on_outcome(&mut self, cx: &mut Cx<'_>, id: EffectId, outcome: Outcome) -> Flow {
        let Some((want, row)) = self.put.take() else {
            unexpected("create", &outcome)
        };
        assert_eq!(want, id);
        let Outcome::Store(StoreOutcome::Put(result)) = outcome else {
            unexpected("create", &outcome)
        };
        let reply = result
            .map(|()| Response::Session(render::fresh_session(&row)))
            .map_err(|e| put_error(&e, &row.harness));
        cx.reply(self.request, reply);
        Flow::Done
    }
}

/// GetSession.
pub(crate) struct GetOp {
    request: RequestId,
    uid: String,
    render: Render,
}

impl GetOp {
    pub(crate) fn new(request: RequestId, uid: String) -> Self {
        Self {
            request,
            uid,
            render: Render::default(),
        }
    }

    pub(crate) fn start(&mut self, cx: &mut Cx<'_>) -> Flow {
        if self.uid.is_empty() {
            cx.reply(
                self.request,
                Err(Status::invalid_argument("uid is required")),
            );
            return Flow::Done;
        }
        self.render = Render::start(cx, &self.uid);
        Flow::Continue
    }

    pub(crate) fn on_outcome(&mut self, cx: &mut Cx<'_>, id: EffectId, outcome: Outcome) -> Flow {
        let result = match self.render.on_outcome(cx, id, outcome) {
            Rendered::Pending => return Flow::Continue,
            Rendered::NotFound => Err(Status::not_found(format!(
                "session {:?} not found",
                shown(&self.uid)
            ))),
            Rendered::Done(s) => Ok(Response::Session(*s)),
            Rendered::Failed(status) => Err(status),
        };
        cx.reply(self.request, result);
        Flow::Done
    }
}

/// The opaque page token: base64url (no padding) of `"<nanos>\0<uid>"`.
pub(crate) fn encode_page_token(created_at: Nanos, uid: &str) -> String {
    let token =
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(format!("{created_at}\0{uid}"));
    debug_assert_eq!(
        decode_page_token(&token),
        Some((created_at, uid.to_owned())),
        "a page token decodes to what it encodes"
    );
    token
}

/// Decodes a page token; `None` when it is malformed.
pub(crate) fn decode_page_token(token: &str) -> Option<(Nanos, String)> {
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(token)
        .ok()?;
    let text = String::from_utf8(bytes).ok()?;
    let (nanos, uid) = text.split_once('\0')?;
    Some((nanos.parse().ok()?, uid.to_owned()))
}

/// ListSessions: a keyset page, each row rendered with its projection.
pub(crate) struct ListOp {
    request: RequestId,
    req: ListSessionsRequest,
    page: Option<EffectId>,
    size: usize,
    rows: Vec<SessionRow>,
    renders: BTreeMap<usize, Render>,
    done: BTreeMap<usize, Session>,
    next_token: String,
}

impl ListOp {
    pub(crate) fn new(request: RequestId, req: ListSessionsRequest) -> Self {
        Self {
            request,
            req,
            page: None,
            size: 0,
            rows: Vec::new(),
            renders: BTreeMap::new(),
            done: BTreeMap::new(),
            next_token: String::new(),
        }
    }

    pub(crate) fn start(&mut self, cx: &mut Cx<'_>) -> Flow {
        let project = if self.req.project.is_empty() {
            cx.config().default_project.clone()
        } else {
            self.req.project.clone()
        };
        self.size = match self.req.page_size {
            n if n <= 0 => DEFAULT_PAGE_SIZE,
            n => (n as usize).min(MAX_PAGE_SIZE),
        };
        assert!((1..=MAX_PAGE_SIZE).contains(&self.size), "a bounded page");
        let after = if self.req.page_token.is_empty() {
            None
        } else {
            match decode_page_token(&self.req.page_token) {
                Some(a) => Some(a),
                None => {
                    cx.reply(
                        self.request,
                        Err(Status::invalid_argument("page_token: malformed page token")),
                    );
                    return Flow::Done;
                }
            }
        };
        let page_size = self.size;
        self.page = Some(cx.request(|id| {
            Effect::Store(StoreEffect::ListSessions {
                id,
                project,
                page_size,
                after,
            })
        }));
        Flow::Continue
    }

    pub(crate) fn on_outcome(&mut self, cx: &mut Cx<'_>, id: EffectId, outcome: Outcome) -> Flow {
        if self.page == Some(id) {
            self.page = None;
            let (rows, more) = match outcome {
                Outcome::Store(StoreOutcome::SessionPage(Ok(page))) => page,
                Outcome::Store(StoreOutcome::SessionPage(Err(e))) => {
                    cx.reply(self.request, Err(e.status("list sessions")));
                    return Flow::Done;
                }
                other => unexpected("list", &other),
            };
            assert!(rows.len() <= self.size, "the store honours the page size");
            if more && let Some(last) = rows.last() {
                self.next_token = encode_page_token(last.created_at, &last.uid);
            }
            debug_assert!(self.rows.is_empty() && self.renders.is_empty(), "one page");
            self.rows = rows;
            for (i, row) in self.rows.clone().into_iter().enumerate() {
                let (render, step) = Render::from_row(cx, row);
                if self.take(cx, i, step) {
                    return Flow::Done;
                }
                self.renders.insert(i, render);
            }
            return self.maybe_reply(cx);
        }
        let Some(i) = self
            .renders
            .iter()
            .find(|(_, r)| r.owns(id))
            .map(|(i, _)| *i)
        else {
            unexpected("list", &outcome)
        };
        let mut render = self.renders.remove(&i).expect("found above");
        match render.on_outcome(cx, id, outcome) {
            Rendered::Pending => {
                self.renders.insert(i, render);
                Flow::Continue
            }
            step => {
                if self.take(cx, i, step) {
                    Flow::Done
                } else {
                    self.maybe_reply(cx)
                }
            }
        }
    }

    /// Records a finished render; true when the call failed (and replied).
    fn take(&mut self, cx: &mut Cx<'_>, i: usize, step: Rendered) -> bool {
        assert!(i < self.rows.len(), "a render per listed row");
        match step {
            Rendered::Pending => false,
            Rendered::Done(s) => {
                let first = self.done.insert(i, *s).is_none();
                debug_assert!(first, "a row is rendered once");
                false
            }
            Rendered::NotFound => {
                cx.reply(
                    self.request,
                    Err(Status::internal("listed session vanished")),
                );
                true
            }
            Rendered::Failed(status) => {
                cx.reply(self.request, Err(status));
                true
            }
        }
    }

    fn maybe_reply(&mut self, cx: &mut Cx<'_>) -> Flow {
        debug_assert!(self.done.len() <= self.rows.len());
        if self.done.len() < self.rows.len() {
            return Flow::Continue;
        }
        let sessions = std::mem::take(&mut self.done).into_values().collect();
        cx.reply(
            self.request,
            Ok(Response::Sessions(ListSessionsResponse {
                sessions,
                next_page_token: std::mem::take(&mut self.next_token),
            })),
        );
        Flow::Done
    }
}
