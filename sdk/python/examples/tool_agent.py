"""An agent that uses the host's tools: a kit harness calling a catalog tool.

Each turn it

1. asks the host's model (``echo``, built into the daemon; any ``--model``
   id works the same) about the user's input: the host journals the call
   and its completion, and serves the recorded completion on a replay or a
   re-drive;
2. files the model's answer with the host's built-in ``append_note`` tool
   as an ordinary CONTROLLER_MEDIATED TOOL_CALL. The harness knows nothing
   of the tool's policy: the daemon decides. Without a rule the built-in
   runs at once; with ``--tool-policy append_note=approval`` the turn parks
   (:class:`~agentsessions.Parked` propagates out of ``run``, the kit
   acknowledges it), and after ``agentctl approve``/``deny`` the host
   re-drives the turn: the recorded completion comes back, then the
   decision and the receipt, and the tool has run at most once;
3. reports the receipt in an OUTPUT of its own.

Serve it and attach it::

    python tool_agent.py 9000
    agentsessionsd --addr 127.0.0.1:8080 --harness tool-agent=127.0.0.1:9000 \\
        --tool-policy append_note=approval
    SID=$(agentctl --server 127.0.0.1:8080 create --harness tool-agent)
    agentctl --server 127.0.0.1:8080 exec --session $SID --input "buy milk"   # parks
    agentctl --server 127.0.0.1:8080 approve $SID                             # runs the tool once

The note lands in ``notes/<session>.notes`` beside the daemon's journal.
"""

from __future__ import annotations

import json
import sys

from agentsessions import (
    CONTROLLER_MEDIATED,
    Harness,
    message_text,
    pb,
    serve,
    text_message,
    tool_call,
    tool_spec,
)
from google.protobuf import json_format

MODEL = "echo"
TOOL = "append_note"


def describe_receipt(receipt: pb.ToolResult) -> str:
    """One line for a receipt: its verdict, text content and structured output."""
    text = "".join(p.text.text for p in receipt.content if p.HasField("text"))
    if receipt.is_error:
        verdict = "denied" if receipt.code == pb.ToolResult.APPROVAL_DENIED else "failed"
        return f"{TOOL} {verdict}: {receipt.error or text}"
    line = f"{TOOL} ok: {text}"
    if receipt.HasField("output"):
        output = json_format.MessageToDict(receipt.output)
        line += " " + json.dumps(output, sort_keys=True, separators=(",", ":"))
    return line


class ToolAgent(Harness):
    id = "tool-agent"
    version = "1"  # keep it while replays stay compatible
    models = [MODEL]
    tools = [tool_spec(TOOL, CONTROLLER_MEDIATED, "Appends a note to the session's notes file")]

    def run(self, start, sink) -> None:
        question = start.last_input_text
        reply = sink.model(MODEL, [text_message("user", question)])
        answer = message_text(reply.message)
        # The same id and idempotency key on every run of this execution, so
        # a re-drive's call is the recorded one and the tool runs at most once.
        call = tool_call(
            "note-1",
            TOOL,
            {"text": answer},
            mediation=CONTROLLER_MEDIATED,
            idempotency_key=f"{self.id}/{start.execution_id}/note-1",
        )
        receipt = sink.tool_call(call)  # raises Parked when the host gates it
        sink.output(describe_receipt(receipt))


def main() -> None:
    port = int(sys.argv[1]) if len(sys.argv) > 1 else 0
    server = serve(ToolAgent(), f"127.0.0.1:{port}")
    print(f"serving tool-agent on {server.address}", flush=True)
    server.wait()


if __name__ == "__main__":
    main()
