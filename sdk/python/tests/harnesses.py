"""Harnesses the tests serve with the kit and route to the daemon."""

from __future__ import annotations

import threading
import time
from typing import Dict, List

from agentsessions import (
    Canceled,
    REQUIRES_APPROVAL,
    Harness,
    HarnessError,
    Parked,
    Start,
    Sink,
    text_message,
    tool_call,
    tool_spec,
)

#: What each harness saw, by execution id (the tests inspect it).
SEEN: Dict[str, List[str]] = {}
_lock = threading.Lock()


def note(execution_id: str, line: str) -> None:
    with _lock:
        SEEN.setdefault(execution_id, []).append(line)


def _receipt_text(receipt) -> str:
    if receipt.is_error:
        return f"note denied: {receipt.error}" if receipt.code == 1 else f"note failed: {receipt.error}"
    return "note written"


class SyncPy(Harness):
    """One model call on the echo model; with a "note ..." input, also a gated append_note."""

    id = "py"
    version = "1"
    models = ["echo"]
    tools = [tool_spec("append_note", REQUIRES_APPROVAL, "Appends a note")]

    def run(self, start: Start, sink: Sink) -> None:
        text = start.last_input_text
        note(start.execution_id, f"start {text} history={len(start.history)}")
        if text == "fail":
            raise RuntimeError("boom from python")
        if text == "wait":
            # Busy outside the sink: a Cancel must still raise in here.
            try:
                for _ in range(400):
                    time.sleep(0.05)
            except Canceled as e:
                note(start.execution_id, f"canceled {e.reason}")
                raise
            except HarnessError as e:
                note(start.execution_id, f"stopped {type(e).__mro__[1].__name__}")
                raise
            return
        reply = sink.model("echo", [text_message("user", text)])
        note(start.execution_id, f"model {reply.message.parts[0].text.text}")
        if text.startswith("note "):
            call = tool_call(
                "n1",
                "append_note",
                {"text": text[5:]},
                mediation=REQUIRES_APPROVAL,
                idempotency_key=f"py/{start.execution_id}/n1",
            )
            try:
                receipt, decision = sink.tool_call_decided(call)
            except Parked as p:
                note(start.execution_id, f"parked {p.ref.request_seq}")
                raise
            note(start.execution_id, f"decided approved={decision.approved} reason={decision.reason}")
            sink.output(_receipt_text(receipt))
        sink.usage(model="echo", input_tokens=len(text), output_tokens=len(text) + 5)


class AsyncPy(Harness):
    """The async flavour: outputs the upper-cased input after an echo model call."""

    id = "pyasync"
    models = ["echo"]

    async def run(self, start: Start, sink) -> None:  # type: ignore[override]
        await sink.model("echo", [text_message("user", start.last_input_text)])
        await sink.output(start.last_input_text.upper())
