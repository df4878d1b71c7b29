#!/usr/bin/env python3
"""A webhook receiver for agentsessionsd's notifications (``--notify URL``).

An independent peer for the integration tests: it knows the wire format
only from docs/operations.md, not from the daemon's code. Every POST is
answered and recorded as one JSON line:

    {"path": ..., "event_id": <X-Agentsessions-Event-Id>,
     "timestamp": <X-Agentsessions-Timestamp>,
     "signature_valid": true | false | null,   # null without --secret
     "timestamp_fresh": true | false,          # within --max-skew of now
     "body": <the parsed JSON body, or null>, "raw": <the body as text>,
     "answered": <the HTTP status sent back>}

The line is written (and flushed) before the answer is sent, so whoever
reads the answer finds the line already there.

    notify_receiver.py [--port N] [--port-file FILE] [--out FILE]
                       [--secret S] [--status CODE] [--fail-first N]
                       [--max-skew SECONDS]

It listens on 127.0.0.1 (``--port 0`` picks a free port; ``--port-file``
gets the bound port, written atomically, once it listens) and exits 0 on
SIGTERM or SIGINT. Standard library only.
"""

import argparse
import hashlib
import hmac
import json
import os
import signal
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

SIGNATURE_PREFIX = "sha256="


def signature_valid(secret, timestamp, signature, raw):
    """HMAC-SHA256(secret, "<timestamp>.<raw>") == the header's hex, or False."""
    if timestamp is None or signature is None or not signature.startswith(SIGNATURE_PREFIX):
        return False
    expected = hmac.new(secret, timestamp.encode("latin-1") + b"." + raw, hashlib.sha256)
    given = signature[len(SIGNATURE_PREFIX):].encode("latin-1")
    return hmac.compare_digest(expected.hexdigest().encode("ascii"), given)


def timestamp_fresh(timestamp, max_skew):
    if timestamp is None or not (timestamp.isascii() and timestamp.isdigit()):
        return False
    return abs(time.time() - int(timestamp)) <= max_skew


def read_body(handler):
    """The request body as sent: by Content-Length, or chunked."""
    if handler.headers.get("Transfer-Encoding", "").lower() == "chunked":
        chunks = []
        while True:
            size = int(handler.rfile.readline().split(b";")[0].strip(), 16)
            if size == 0:
                while handler.rfile.readline() not in (b"\r\n", b"\n", b""):
                    pass  # trailers
                return b"".join(chunks)
            chunks.append(handler.rfile.read(size))
            handler.rfile.readline()  # the CRLF after each chunk
    return handler.rfile.read(int(handler.headers.get("Content-Length") or 0))


class Receiver(ThreadingHTTPServer):
    def __init__(self, address, opts):
        super().__init__(address, Handler)
        self.opts = opts
        self.lock = threading.Lock()
        self.received = 0

    def record(self, line):
        """Number this request, pick its answer, write its line; the status."""
        with self.lock:
            self.received += 1
            failing = self.received <= self.opts.fail_first
            line["answered"] = 503 if failing else self.opts.status
            text = json.dumps(line, sort_keys=True) + "\n"
            if self.opts.out:
                with open(self.opts.out, "a", encoding="utf-8") as f:
                    f.write(text)
                    f.flush()
            else:
                sys.stdout.write(text)
                sys.stdout.flush()
            return line["answered"]


class Handler(BaseHTTPRequestHandler):
    def do_POST(self):
        opts = self.server.opts
        raw = read_body(self)
        timestamp = self.headers.get("X-Agentsessions-Timestamp")
        signature = self.headers.get("X-Agentsessions-Signature")
        try:
            body = json.loads(raw)
        except ValueError:
            body = None
        status = self.server.record({
            "path": self.path,
            "event_id": self.headers.get("X-Agentsessions-Event-Id"),
            "timestamp": timestamp,
            "signature_valid": None if opts.secret is None else signature_valid(
                opts.secret.encode("utf-8"), timestamp, signature, raw),
            "timestamp_fresh": timestamp_fresh(timestamp, opts.max_skew),
            "body": body,
            "raw": raw.decode("utf-8", "replace"),
        })
        self.send_response(status)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, fmt, *args):
        pass  # the out file is the log


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--port", type=int, default=0, help="0 picks a free port")
    p.add_argument("--port-file", help="write the bound port here once listening")
    p.add_argument("--out", help="append one JSON line per POST (default: stdout)")
    p.add_argument("--secret", help="check X-Agentsessions-Signature with this secret")
    p.add_argument("--status", type=int, default=204, help="HTTP status to answer")
    p.add_argument("--fail-first", type=int, default=0, metavar="N",
                   help="answer 503 to the first N requests, then --status")
    p.add_argument("--max-skew", type=int, default=300, metavar="SECONDS",
                   help="how far the timestamp may be from now and be fresh")
    opts = p.parse_args(argv)

    server = Receiver(("127.0.0.1", opts.port), opts)
    stop = lambda *_: threading.Thread(target=server.shutdown, daemon=True).start()
    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    if opts.port_file:
        tmp = opts.port_file + ".tmp"
        with open(tmp, "w", encoding="ascii") as f:
            f.write(str(server.server_address[1]))
        os.replace(tmp, opts.port_file)
    try:
        server.serve_forever()
    finally:
        server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
