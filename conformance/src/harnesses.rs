//! The suite's own harnesses, served over `Harness.Connect` with the shells
//! harness SDK and attached to the host under test by `--harness
//! name=address`.
//!
//! They share one [`Control`] per environment, through which a check sees
//! what each run was started with and what it received, and can make the
//! next run stop and hold the turn (so the host can be killed while the
//! turn is provably in flight).

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agentsessions_machine::events;
use agentsessions_proto::v1::{
    ApprovalResult, Capabilities, HarnessDescriptor, Mediation, Resumability, ToolCall, ToolResult,
    ToolSpec, Usage,
};
use agentsessions_shells::harness::{Harness, HarnessError, ModelRequest, Sink, StartInfo};
use pbjson_types::{ListValue, Struct, Value, value::Kind};
use serde_json::Value as Json;
use tokio::sync::watch;

/// Echo-like: one model call shaped like the reference echo harness.
pub const ECHO: &str = "conf-echo";
/// Outputs a fresh random nonce of its own, then asks the model.
pub const NONDET: &str = "conf-nondet";
/// Makes one host-executed tool call described by the Exec config.
pub const TOOL: &str = "conf-tool";
/// Makes one REQUIRES_APPROVAL tool call described by the Exec config.
pub const APPROVAL: &str = "conf-approval";
/// Always ends FAILED with "boom".
pub const FAIL: &str = "conf-fail";
/// Acknowledges a park with somebody else's tuple (raw protocol peer).
pub const FOREIGN_PARK: &str = "conf-foreign-park";

/// An input containing this reports the model's usage through the sink.
pub const USAGE: &str = "+usage";

/// What one run was started with.
#[derive(Debug, Clone)]
pub struct StartSeen {
    /// The harness name.
    pub harness: &'static str,
    /// The Start, as the SDK delivered it.
    pub start: StartInfo,
}

/// What a tool-calling run got back.
#[derive(Debug, Clone)]
pub struct ReceiptSeen {
    /// The execution.
    pub execution_id: String,
    /// The receipt, or the error the sink returned.
    pub result: Result<ToolResult, String>,
    /// The decision frame of a gated call.
    pub decision: Option<ApprovalResult>,
}

/// Shared observation and steering of the suite's harnesses.
#[derive(Debug)]
pub struct Control {
    hold_armed: AtomicBool,
    /// The hold count when the hold was last armed.
    armed_at: AtomicUsize,
    held: watch::Sender<usize>,
    starts: Mutex<Vec<StartSeen>>,
    receipts: Mutex<Vec<ReceiptSeen>>,
    runs: AtomicUsize,
}

impl Default for Control {
    fn default() -> Self {
        Self {
            hold_armed: AtomicBool::new(false),
            armed_at: AtomicUsize::new(0),
            held: watch::channel(0).0,
            starts: Mutex::default(),
            receipts: Mutex::default(),
            runs: AtomicUsize::new(0),
        }
    }
}

impl Control {
    /// Makes the next run that reaches its hold point stop there for good;
    /// only a host that goes away releases it.
    pub fn arm_hold(&self) {
        self.armed_at.store(*self.held.borrow(), Ordering::SeqCst);
        self.hold_armed.store(true, Ordering::SeqCst);
    }

    /// Waits until a run holds on the last armed hold; false on timeout.
    pub async fn wait_held(&self, timeout: Duration) -> bool {
        let mut rx = self.held.subscribe();
        let armed_at = self.armed_at.load(Ordering::SeqCst);
        tokio::time::timeout(timeout, rx.wait_for(|n| *n > armed_at))
            .await
            .is_ok_and(|r| r.is_ok())
    }

    /// Every Start delivered so far.
    pub fn starts(&self) -> Vec<StartSeen> {
        self.starts.lock().map(|s| s.clone()).unwrap_or_default()
    }

    /// Every tool receipt delivered so far.
    pub fn receipts(&self) -> Vec<ReceiptSeen> {
        self.receipts.lock().map(|r| r.clone()).unwrap_or_default()
    }

    /// How many runs started.
    pub fn runs(&self) -> usize {
        self.runs.load(Ordering::SeqCst)
    }

    fn started(&self, harness: &'static str, start: &StartInfo) -> usize {
        if let Ok(mut s) = self.starts.lock() {
            s.push(StartSeen {
                harness,
                start: start.clone(),
            });
        }
        self.runs.fetch_add(1, Ordering::SeqCst)
    }

    fn receipt(&self, seen: ReceiptSeen) {
        if let Ok(mut r) = self.receipts.lock() {
            r.push(seen);
        }
    }

    /// The hold point: parks the run forever if a hold is armed.
    async fn maybe_hold(&self) {
        if self.hold_armed.swap(false, Ordering::SeqCst) {
            self.held.send_modify(|n| *n += 1);
            std::future::pending::<()>().await;
        }
    }
}

fn descriptor(id: &str, tools: Vec<ToolSpec>) -> HarnessDescriptor {
    HarnessDescriptor {
        id: id.to_owned(),
        models: vec!["echo".to_owned()],
        tools,
        capabilities: Some(Capabilities {
            resumability: Resumability::StatelessReplay as i32,
            fork_safe: true,
            streaming: true,
            ..Capabilities::default()
        }),
        version: "1".to_owned(),
    }
}

/// The echo request: model "echo", the last input as one user message. The
/// same shape as the reference echo harness, so input hashes agree.
/// Asks the provider the hosts under test serve ([`crate::env::MODEL`]):
/// hosts route a call by the id it names, and checks count the fake
/// provider's requests.
fn echo_request(start: &StartInfo) -> ModelRequest {
    ModelRequest::new(
        crate::env::MODEL,
        vec![events::text_message("user", &start.last_input_text())],
    )
}

/// See [`ECHO`]. Holds (when armed) after the model answered and any usage
/// was reported, i.e. with MODEL_CALL, OUTPUT (and USAGE) durable.
#[derive(Debug)]
pub struct ConfEcho(pub Arc<Control>);

#[tonic::async_trait]
impl Harness for ConfEcho {
    fn describe(&self) -> HarnessDescriptor {
        descriptor(ECHO, Vec::new())
    }

    async fn run(&self, start: StartInfo, sink: &mut Sink) -> Result<(), HarnessError> {
        self.0.started(ECHO, &start);
        sink.model(echo_request(&start)).await?;
        if start.last_input_text().contains(USAGE) {
            // Derived from the request, not the provider: a served
            // completion carries no usage, and a re-driven run must report
            // exactly what the live run did.
            let usage = Usage {
                model: "echo".into(),
                input_tokens: start.last_input_text().len() as i64,
                output_tokens: 1,
                reasoning_tokens: 0,
            };
            sink.usage(usage).await?;
        }
        self.0.maybe_hold().await;
        Ok(())
    }
}

/// See [`NONDET`].
#[derive(Debug)]
pub struct ConfNondet(pub Arc<Control>);

#[tonic::async_trait]
impl Harness for ConfNondet {
    fn describe(&self) -> HarnessDescriptor {
        descriptor(NONDET, Vec::new())
    }

    async fn run(&self, start: StartInfo, sink: &mut Sink) -> Result<(), HarnessError> {
        self.0.started(NONDET, &start);
        sink.output(&format!("nonce:{:016x}", fastrand::u64(..)))
            .await?;
        sink.model(echo_request(&start)).await?;
        Ok(())
    }
}

/// See [`FAIL`].
#[derive(Debug)]
pub struct ConfFail(pub Arc<Control>);

#[tonic::async_trait]
impl Harness for ConfFail {
    fn describe(&self) -> HarnessDescriptor {
        descriptor(FAIL, Vec::new())
    }

    async fn run(&self, start: StartInfo, _sink: &mut Sink) -> Result<(), HarnessError> {
        self.0.started(FAIL, &start);
        Err(HarnessError::failed("boom"))
    }
}

/// A tool call as the Exec config describes it (JSON; absent fields take
/// the defaults in brackets):
///
/// - `tool` [`append_note`], `args` [`{"text": <last input>}`]
/// - `mediation`: `controller`, `approval`, `reported`, `unspecified`
///   [the harness's own tier]
/// - `key`: `auto` (`<harness>/<execution>/c1`), `none`, or a literal [auto]
/// - `bad_arg`: `nan`, `inf`, `-inf`, `nested_nan` adds an argument no
///   canonical JSON can carry
/// - `swallow`: a refused call is ignored and the run ends normally
/// - `mutate_on_redrive`: every run after the first sends other arguments
/// - `model_first`: asks the model (the echo request) before the call
///
/// The run holds (when armed) right after the receipt, then outputs a
/// summary of it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ToolPlan {
    tool: String,
    args: Option<Json>,
    mediation: Option<Mediation>,
    key: Option<String>,
    bad_arg: Option<String>,
    swallow: bool,
    mutate_on_redrive: bool,
    model_first: bool,
}

impl ToolPlan {
    fn parse(config: &[u8]) -> Result<Self, HarnessError> {
        if config.is_empty() {
            return Ok(Self::default());
        }
        let v: Json = serde_json::from_slice(config)
            .map_err(|e| HarnessError::failed(format!("config: {e}")))?;
        let text = |k: &str| v.get(k).and_then(Json::as_str).map(str::to_owned);
        let mediation = match text("mediation").as_deref() {
            None => None,
            Some("controller") => Some(Mediation::ControllerMediated),
            Some("approval") => Some(Mediation::RequiresApproval),
            Some("reported") => Some(Mediation::InHarnessReported),
            Some("unspecified") => Some(Mediation::Unspecified),
            Some(other) => return Err(HarnessError::failed(format!("mediation {other:?}"))),
        };
        Ok(Self {
            tool: text("tool").unwrap_or_default(),
            args: v.get("args").cloned(),
            mediation,
            key: text("key"),
            bad_arg: text("bad_arg"),
            swallow: v.get("swallow").and_then(Json::as_bool) == Some(true),
            mutate_on_redrive: v.get("mutate_on_redrive").and_then(Json::as_bool) == Some(true),
            model_first: v.get("model_first").and_then(Json::as_bool) == Some(true),
        })
    }
}

/// Converts plain JSON into a protobuf Value.
pub fn to_value(v: &Json) -> Value {
    let kind = match v {
        Json::Null => Kind::NullValue(0),
        Json::Bool(b) => Kind::BoolValue(*b),
        Json::Number(n) => Kind::NumberValue(n.as_f64().unwrap_or_default()),
        Json::String(s) => Kind::StringValue(s.clone()),
        Json::Array(a) => Kind::ListValue(ListValue {
            values: a.iter().map(to_value).collect(),
        }),
        Json::Object(o) => Kind::StructValue(Struct {
            fields: o.iter().map(|(k, v)| (k.clone(), to_value(v))).collect(),
        }),
    };
    Value { kind: Some(kind) }
}

fn number(n: f64) -> Value {
    Value {
        kind: Some(Kind::NumberValue(n)),
    }
}

/// See [`TOOL`] and [`APPROVAL`]: one harness type, two tiers.
#[derive(Debug)]
pub struct ConfTool {
    control: Arc<Control>,
    name: &'static str,
    tier: Mediation,
}

impl ConfTool {
    /// The controller-mediated tool harness.
    pub fn mediated(control: Arc<Control>) -> Self {
        Self {
            control,
            name: TOOL,
            tier: Mediation::ControllerMediated,
        }
    }

    /// The approval-gated tool harness.
    pub fn gated(control: Arc<Control>) -> Self {
        Self {
            control,
            name: APPROVAL,
            tier: Mediation::RequiresApproval,
        }
    }

    fn call(&self, plan: &ToolPlan, start: &StartInfo, run: usize) -> ToolCall {
        let tool = if plan.tool.is_empty() {
            "append_note".to_owned()
        } else {
            plan.tool.clone()
        };
        let mut args = match &plan.args {
            Some(Json::Object(o)) => Struct {
                fields: o.iter().map(|(k, v)| (k.clone(), to_value(v))).collect(),
            },
            _ => Struct::from_iter([("text".to_owned(), Value::from(start.last_input_text()))]),
        };
        if plan.mutate_on_redrive && run > 0 {
            args.fields.insert(
                "text".to_owned(),
                Value::from(format!("changed on run {run}")),
            );
        }
        match plan.bad_arg.as_deref() {
            Some("nan") => {
                args.fields.insert("bad".into(), number(f64::NAN));
            }
            Some("inf") => {
                args.fields.insert("bad".into(), number(f64::INFINITY));
            }
            Some("-inf") => {
                args.fields.insert("bad".into(), number(f64::NEG_INFINITY));
            }
            Some("nested_nan") => {
                let inner = Struct::from_iter([(
                    "list".to_owned(),
                    Value {
                        kind: Some(Kind::ListValue(ListValue {
                            values: vec![number(1.0), number(f64::NAN)],
                        })),
                    },
                )]);
                args.fields.insert(
                    "bad".into(),
                    Value {
                        kind: Some(Kind::StructValue(inner)),
                    },
                );
            }
            _ => {}
        }
        let idempotency_key = match plan.key.as_deref() {
            None | Some("auto") => format!("{}/{}/c1", self.name, start.execution_id),
            Some("none") => String::new(),
            Some(literal) => literal.to_owned(),
        };
        ToolCall {
            id: "c1".to_owned(),
            tool,
            args: Some(args),
            mediation: plan.mediation.unwrap_or(self.tier) as i32,
            idempotency_key,
        }
    }
}

#[tonic::async_trait]
impl Harness for ConfTool {
    fn describe(&self) -> HarnessDescriptor {
        descriptor(
            self.name,
            vec![ToolSpec {
                name: "append_note".to_owned(),
                description: "Appends a note".to_owned(),
                mediation: self.tier as i32,
            }],
        )
    }

    async fn run(&self, start: StartInfo, sink: &mut Sink) -> Result<(), HarnessError> {
        let run = self.control.started(self.name, &start);
        let plan = ToolPlan::parse(&start.config)?;
        if plan.model_first {
            sink.model(echo_request(&start)).await?;
        }
        let call = self.call(&plan, &start, run);
        let outcome = sink.tool_call_decided(call).await;
        let (result, decision) = match &outcome {
            Ok((r, d)) => (Ok(r.clone()), d.clone()),
            Err(HarnessError::Parked(_)) => return outcome.map(|_| ()),
            Err(e) => (Err(e.to_string()), None),
        };
        self.control.receipt(ReceiptSeen {
            execution_id: start.execution_id.clone(),
            result: result.clone(),
            decision,
        });
        let receipt = match (result, plan.swallow) {
            (Ok(r), _) => r,
            // Pretend nothing happened: the host must not take the END
            // that follows as a completed turn.
            (Err(_), true) => return Ok(()),
            (Err(_), false) => return outcome.map(|_| ()),
        };
        self.control.maybe_hold().await;
        let summary = if receipt.is_error {
            format!("tool error ({}): {}", receipt.code, receipt.error)
        } else {
            "tool ok".to_owned()
        };
        sink.output(&summary).await
    }
}

/// The suite's SDK harnesses by name.
pub fn sdk_harnesses(control: &Arc<Control>) -> Vec<(&'static str, Arc<dyn Harness>)> {
    vec![
        (ECHO, Arc::new(ConfEcho(Arc::clone(control)))),
        (NONDET, Arc::new(ConfNondet(Arc::clone(control)))),
        (TOOL, Arc::new(ConfTool::mediated(Arc::clone(control)))),
        (APPROVAL, Arc::new(ConfTool::gated(Arc::clone(control)))),
        (FAIL, Arc::new(ConfFail(Arc::clone(control)))),
    ]
}
