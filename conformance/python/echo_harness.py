"""An echo harness in Python, on the agentsessions kit: one model call per turn.

Install the kit, then serve (port 0 picks a free one):

    pip install ./sdk/python
    python echo_harness.py 9000
    agentsessionsd --harness python-echo=127.0.0.1:9000
"""

import sys

from agentsessions import Harness, HarnessServer, text_message
from agentsessions import serve as serve_harness


class Echo(Harness):
    id = "python-echo"
    version = "1"  # keep it while replays stay compatible
    models = ["echo"]

    def run(self, start, sink):
        # Every model call goes through the host, which journals it and
        # answers; on a replay it serves the recorded answer instead. The
        # host journals the completion as the turn's output; returning
        # ends the turn COMPLETED.
        sink.model("echo", [text_message("user", start.last_input_text)])


def serve(port: int) -> tuple[HarnessServer, int]:
    server = serve_harness(Echo(), f"127.0.0.1:{port}")
    return server, server.port


if __name__ == "__main__":
    server, bound = serve(int(sys.argv[1]) if len(sys.argv) > 1 else 0)
    print(f"serving python-echo on 127.0.0.1:{bound}", flush=True)
    server.wait()
