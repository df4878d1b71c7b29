//! Routing model calls by the id the harness names.
//!
//! Invariant: a call reaches the client registered under its own id and no
//! other. `echo` is always the built-in echo model, so a provider that is
//! down never fails an echo turn, and an id nothing serves is refused
//! without a request leaving the host. The only substitution is for an
//! empty id, which means "the host's default": the first provider model,
//! else echo.

use std::collections::BTreeMap;
use std::sync::Arc;

use agentsessions_proto::v1::ModelCall;

use super::{BoxFuture, ChunkSink, EchoModel, ModelClient, ModelError};
use agentsessions_machine::vocab::ModelReply;

/// The id of the built-in echo model.
pub const ECHO: &str = "echo";

/// Model clients by id.
#[derive(Clone)]
pub struct ModelRouter {
    clients: BTreeMap<String, Arc<dyn ModelClient>>,
    /// The id an empty request id goes to.
    default: String,
}

impl std::fmt::Debug for ModelRouter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ModelRouter")
            .field("ids", &self.clients.keys().collect::<Vec<_>>())
            .field("default", &self.default)
            .finish()
    }
}

impl Default for ModelRouter {
    fn default() -> Self {
        Self::new()
    }
}

impl ModelRouter {
    /// A router serving only `echo`.
    pub fn new() -> Self {
        let mut clients: BTreeMap<String, Arc<dyn ModelClient>> = BTreeMap::new();
        clients.insert(ECHO.to_owned(), Arc::new(EchoModel));
        Self {
            clients,
            default: ECHO.to_owned(),
        }
    }

    /// Serves `id` with `client`; the first provider added becomes the
    /// default. `echo` cannot be replaced: journals written with the echo
    /// model must replay against it.
    pub fn serve(&mut self, id: &str, client: Arc<dyn ModelClient>) -> Result<(), RouteError> {
        if id.is_empty() || id == ECHO {
            return Err(RouteError::Reserved(id.to_owned()));
        }
        if self.clients.contains_key(id) {
            return Err(RouteError::Duplicate(id.to_owned()));
        }
        self.clients.insert(id.to_owned(), client);
        if self.default == ECHO {
            self.default = id.to_owned();
        }
        assert!(self.clients.contains_key(&self.default));
        Ok(())
    }

    /// Every id served, `echo` included.
    pub fn ids(&self) -> impl Iterator<Item = &str> {
        self.clients.keys().map(String::as_str)
    }

    /// The client for `id`, if one serves it.
    fn client(&self, id: &str) -> Option<&Arc<dyn ModelClient>> {
        let id = if id.is_empty() { &self.default } else { id };
        self.clients.get(id)
    }
}

/// Why a model id could not be routed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RouteError {
    /// `echo` and the empty id belong to the host.
    #[error("--model {0:?}: the id is reserved for the built-in echo model")]
    Reserved(String),
    /// The same id twice.
    #[error("--model {0:?}: duplicate id")]
    Duplicate(String),
}

impl ModelClient for ModelRouter {
    fn invoke<'a>(
        &'a self,
        request: &'a ModelCall,
        on_chunk: ChunkSink<'a>,
    ) -> BoxFuture<'a, Result<ModelReply, ModelError>> {
        match self.client(&request.model) {
            Some(client) => client.invoke(request, on_chunk),
            None => Box::pin(std::future::ready(Err(ModelError::NotServed {
                model: request.model.clone(),
            }))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use agentsessions_proto::v1::{Message, Part, TextPart, part};

    /// Answers with its own name, so a test sees which client was called.
    struct Named(&'static str);

    impl ModelClient for Named {
        fn invoke<'a>(
            &'a self,
            _request: &'a ModelCall,
            _on_chunk: ChunkSink<'a>,
        ) -> BoxFuture<'a, Result<ModelReply, ModelError>> {
            Box::pin(std::future::ready(Ok(ModelReply {
                message: Some(super::super::assistant_text(self.0.to_owned())),
                usage: None,
            })))
        }
    }

    fn call(model: &str) -> ModelCall {
        ModelCall {
            model: model.to_owned(),
            messages: vec![Message {
                role: "user".into(),
                parts: vec![Part {
                    part: Some(part::Part::Text(TextPart { text: "hi".into() })),
                }],
            }],
            ..ModelCall::default()
        }
    }

    async fn answer(router: &ModelRouter, model: &str) -> Result<String, ModelError> {
        let mut sink = |_: String| {};
        let reply = router.invoke(&call(model), &mut sink).await?;
        Ok(super::super::message_text(&reply.message.unwrap()))
    }

    #[tokio::test]
    async fn echo_stays_the_builtin_model_when_a_provider_is_configured() {
        let mut router = ModelRouter::new();
        router
            .serve("gpt-test", Arc::new(Named("provider")))
            .unwrap();
        assert_eq!(answer(&router, "echo").await.unwrap(), "echo:hi");
        assert_eq!(answer(&router, "gpt-test").await.unwrap(), "provider");
    }

    #[tokio::test]
    async fn an_empty_id_goes_to_the_first_provider_else_echo() {
        let mut router = ModelRouter::new();
        assert_eq!(answer(&router, "").await.unwrap(), "echo:hi");
        router.serve("a", Arc::new(Named("a"))).unwrap();
        router.serve("b", Arc::new(Named("b"))).unwrap();
        assert_eq!(answer(&router, "").await.unwrap(), "a");
    }

    #[tokio::test]
    async fn an_unserved_id_is_refused_without_a_request() {
        let router = ModelRouter::new();
        let e = answer(&router, "gpt-4o").await.unwrap_err();
        assert_eq!(
            e,
            ModelError::NotServed {
                model: "gpt-4o".into()
            }
        );
        assert!(!e.is_unavailable(), "a retry would fail the same way");
    }

    #[test]
    fn echo_and_duplicates_cannot_be_served_twice() {
        let mut router = ModelRouter::new();
        assert!(matches!(
            router.serve("echo", Arc::new(Named("x"))),
            Err(RouteError::Reserved(_))
        ));
        router.serve("m", Arc::new(Named("x"))).unwrap();
        assert!(matches!(
            router.serve("m", Arc::new(Named("y"))),
            Err(RouteError::Duplicate(_))
        ));
        assert_eq!(router.ids().collect::<Vec<_>>(), ["echo", "m"]);
    }
}
