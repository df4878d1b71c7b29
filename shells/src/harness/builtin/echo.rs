//! The echo harness.

use agentsessions_machine::events;
use agentsessions_proto::v1::{HarnessDescriptor, Resumability};

use super::descriptor;
use crate::harness::{Harness, HarnessError, ModelRequest, Sink, StartInfo};

/// Asks model "echo" to complete the last input's text, sent as one user
/// message with no params or tools. The request must keep exactly this
/// shape: its input hash has to equal the one journals recorded by the
/// reference echo harness, or their replays diverge. It emits nothing of
/// its own; the host records the completion as the output.
#[derive(Debug, Clone, Copy, Default)]
pub struct Echo;

#[tonic::async_trait]
impl Harness for Echo {
    fn describe(&self) -> HarnessDescriptor {
        descriptor(
            "echo",
            vec!["echo".to_owned()],
            Resumability::StatelessReplay,
            true,
        )
    }

    async fn run(&self, start: StartInfo, sink: &mut Sink) -> Result<(), HarnessError> {
        let text = start.last_input_text();
        sink.model(ModelRequest::new(
            "echo",
            vec![events::text_message("user", &text)],
        ))
        .await?;
        Ok(())
    }
}
