//! ListHarnesses: static and registered harnesses merged in name order.
//!
//! The page token is the last name returned (base64url, no padding), so a
//! page resumes strictly after it in both sources. Static names come from
//! this host's routes, rows from the store; one more entry than the page
//! size is taken to learn whether another page follows.

use std::cmp::Ordering;

use agentsessions_proto::v1::{HarnessRegistration, ListHarnessesRequest, ListHarnessesResponse};
use base64::Engine as _;

use super::{registration, static_registration};
use crate::ops::stages::cx::Cx;
use crate::ops::stages::flow::{Flow, unexpected};
use crate::vocab::config::{DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE};
use crate::vocab::{
    Effect, EffectId, HarnessRow, Outcome, RequestId, Response, Status, StoreEffect, StoreOutcome,
};

pub(crate) struct ListOp {
    request: RequestId,
    req: ListHarnessesRequest,
    size: usize,
    statics: Vec<String>,
    page: Option<EffectId>,
}

/// One listed entry before rendering.
enum Entry {
    Static(String),
    Row(HarnessRow),
}

impl Entry {
    fn name(&self) -> &str {
        match self {
            Self::Static(n) => n,
            Self::Row(r) => &r.name,
        }
    }
}

fn encode_token(name: &str) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(name)
}

fn decode_token(token: &str) -> Option<String> {
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(token)
        .ok()?;
    String::from_utf8(bytes).ok().filter(|n| !n.is_empty())
}

/// Merges two name-ordered lists. A name in both is a static harness that
/// another host registered; this host serves the static one, so it is
/// listed once, as static.
fn merge(statics: Vec<String>, rows: Vec<HarnessRow>) -> Vec<Entry> {
    let mut out = Vec::with_capacity(statics.len() + rows.len());
    let mut statics = statics.into_iter().peekable();
    let mut rows = rows.into_iter().peekable();
    loop {
        let order = match (statics.peek(), rows.peek()) {
            (None, None) => break,
            (Some(_), None) => Ordering::Less,
            (None, Some(_)) => Ordering::Greater,
            (Some(s), Some(r)) => s.as_str().cmp(r.name.as_str()),
        };
        if order == Ordering::Equal {
            rows.next();
        }
        let entry = if order == Ordering::Greater {
            rows.next().map(Entry::Row)
        } else {
            statics.next().map(Entry::Static)
        };
        out.extend(entry);
    }
    out
}

impl ListOp {
    pub(crate) fn new(request: RequestId, req: ListHarnessesRequest) -> Self {
        Self {
            request,
            req,
            size: 0,
            statics: Vec::new(),
            page: None,
        }
    }

    pub(crate) fn start(&mut self, cx: &mut Cx<'_>) -> Flow {
        match self.plan(cx) {
            Ok(after) => {
                let (limit, include_retired) = (self.size + 1, self.req.include_retired);
                self.page = Some(cx.request(|id| {
                    Effect::Store(StoreEffect::ListHarnessRows {
                        id,
                        after,
                        limit,
                        include_retired,
                    })
                }));
                Flow::Continue
            }
            Err(status) => {
                cx.reply(self.request, Err(status));
                Flow::Done
            }
        }
    }

    /// Sizes the page and decodes the token; returns the exclusive lower
    /// bound ("" for the first page).
    fn plan(&mut self, cx: &Cx<'_>) -> Result<String, Status> {
        self.size = match usize::try_from(self.req.page_size) {
            Err(_) => return Err(Status::invalid_argument("page_size must not be negative")),
            Ok(0) => DEFAULT_PAGE_SIZE,
            Ok(n) => n.min(MAX_PAGE_SIZE),
        };
        assert!((1..=MAX_PAGE_SIZE).contains(&self.size), "a bounded page");
        let after = if self.req.page_token.is_empty() {
            String::new()
        } else {
            decode_token(&self.req.page_token)
                .ok_or_else(|| Status::invalid_argument("page_token: malformed page token"))?
        };
        self.statics = cx
            .core
            .routes
            .iter()
            .filter(|(name, route)| !route.registered && name.as_str() > after.as_str())
            .map(|(name, _)| name.clone())
            .take(self.size + 1)
            .collect();
        debug_assert!(
            self.statics.windows(2).all(|w| w[0] < w[1]),
            "static names come in name order"
        );
        Ok(after)
    }

    pub(crate) fn on_outcome(&mut self, cx: &mut Cx<'_>, id: EffectId, outcome: Outcome) -> Flow {
        if self.page != Some(id) {
            unexpected("list harnesses", &outcome)
        }
        self.page = None;
        let rows = match outcome {
            Outcome::Store(StoreOutcome::HarnessRows(Ok(rows))) => rows,
            Outcome::Store(StoreOutcome::HarnessRows(Err(e))) => {
                let status = e.status("list harnesses");
                cx.reply(self.request, Err(status));
                return Flow::Done;
            }
            other => unexpected("list harnesses", &other),
        };
        let mut entries = merge(std::mem::take(&mut self.statics), rows);
        let mut next_page_token = String::new();
        if entries.len() > self.size {
            entries.truncate(self.size);
            if let Some(last) = entries.last() {
                next_page_token = encode_token(last.name());
            }
        }
        let harnesses: Vec<HarnessRegistration> = entries
            .iter()
            .map(|e| match e {
                Entry::Static(name) => static_registration(name),
                Entry::Row(row) => registration(cx, row),
            })
            .collect();
        assert!(harnesses.len() <= self.size, "a bounded page");
        cx.reply(
            self.request,
            Ok(Response::Harnesses(ListHarnessesResponse {
                harnesses,
                next_page_token,
            })),
        );
        Flow::Done
    }
}
