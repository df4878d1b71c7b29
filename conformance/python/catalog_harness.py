"""A Python harness, on the agentsessions kit (sdk/python), that calls one
tool of the host's catalog.

The invariant it shows: a harness needs to know nothing of a tool's policy.
The turn's last input is JSON, {"tool": "fs__write_file", "args": {...}};
the harness emits it as an ordinary CONTROLLER_MEDIATED TOOL_CALL, and the
host decides: it runs the call at once, or gates it (a `park` frame, which
the kit acknowledges before closing without END; the Resume after a
decision sends the decision, then the receipt). With the receipt the
harness outputs `ok: TEXT ERROR` or `error: TEXT ERROR` and ends COMPLETED.

Prints `serving py-catalog on 127.0.0.1:PORT` and serves until stdin
closes, so it never outlives its test (tests/python_catalog.rs).
"""

import json
import sys

from agentsessions import Harness, pb, serve, tool_call

NAME = "py-catalog"


def text(parts) -> str:
    return "".join(p.text.text for p in parts if p.HasField("text"))


class Catalog(Harness):
    id = NAME

    def run(self, start, sink):
        ask = json.loads(start.last_input_text or "{}")
        # The same id and key on every run of the execution: a Resume's
        # call is the recorded one.
        call = tool_call(
            "c1",
            ask.get("tool", ""),
            ask.get("args", {}),
            idempotency_key=f"{NAME}/{start.execution_id}/c1",
        )
        # A gated call raises Parked here, and the kit acknowledges the
        # park with the very ApprovalRef; after the decision a Resume runs
        # this again and the receipt comes back.
        receipt: pb.ToolResult = sink.tool_call(call)
        verdict = "error" if receipt.is_error else "ok"
        sink.output(f"{verdict}: {text(receipt.content)} {receipt.error}")


def main() -> None:
    server = serve(Catalog(), "127.0.0.1:0")
    print(f"serving {NAME} on 127.0.0.1:{server.port}", flush=True)
    for _ in sys.stdin:
        pass
    server.stop()


if __name__ == "__main__":
    main()
