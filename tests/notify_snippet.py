#!/usr/bin/env python3
"""Runs the signature check that docs/operations.md shows, as written.

    python3 tests/notify_snippet.py docs/operations.md

Takes the ```python block right under the line
`<!-- tested: tests/notify_snippet.py -->`, checks that importing it does
nothing but import and define (no network, no side effects), executes it
and calls its `verify` on requests signed here, independently, with
hmac/hashlib. Exit 0 when every check passes; otherwise 1 and the failures.
Standard library only.
"""

import ast
import hashlib
import hmac
import sys

MARKER = "<!-- tested: tests/notify_snippet.py -->"
SECRET = b"s3cret, with bytes \xff that are not ASCII"
NOW = 1_767_225_600.0
BODY = b'{"id":"ev-1","kind":"approval.requested","session":"s-1","seq":7,"tool":"fs__write_file"}'


def extract(text):
    """The python block under the marker; SystemExit when the doc is off."""
    lines = text.splitlines()
    at = [i for i, line in enumerate(lines) if line.strip() == MARKER]
    if len(at) != 1:
        sys.exit(f"expected the marker line {MARKER!r} exactly once, found {len(at)}")
    rest = lines[at[0] + 1:]
    if not rest or rest[0].strip() != "```python":
        sys.exit("the line right after the marker must open a ```python block")
    try:
        end = next(i for i, line in enumerate(rest[1:], 1) if line.strip() == "```")
    except StopIteration:
        sys.exit("the ```python block after the marker is never closed")
    return "\n".join(rest[1:end]) + "\n"


def check_inert(source):
    """Top level: imports, function definitions and docstrings, nothing that runs."""
    for node in ast.parse(source).body:
        inert = isinstance(node, (ast.Import, ast.ImportFrom, ast.FunctionDef)) or (
            isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant))
        if isinstance(node, ast.FunctionDef) and node.decorator_list:
            inert = False
        if not inert:
            sys.exit(f"the snippet runs code at import (line {node.lineno}): "
                     f"{ast.dump(node)[:80]}")
    for node in ast.walk(ast.parse(source)):
        names = [a.name for a in node.names] if isinstance(node, ast.Import) else (
            [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
        for name in names:
            if name.split(".")[0] not in ("hashlib", "hmac"):
                sys.exit(f"the snippet imports {name}: only hashlib and hmac are expected")


def sign(secret, timestamp, body):
    return "sha256=" + hmac.new(secret, f"{timestamp}.".encode() + body, hashlib.sha256).hexdigest()


def headers(timestamp, signature, case=str.title):
    h = {case("x-agentsessions-event-id"): "ev-1",
         case("content-type"): "application/json",
         case("x-agentsessions-timestamp"): timestamp}
    if signature is not None:
        h[case("x-agentsessions-signature")] = signature
    return h


def main(argv):
    if len(argv) != 2:
        sys.exit(f"usage: {argv[0]} docs/operations.md")
    with open(argv[1], encoding="utf-8") as f:
        source = extract(f.read())
    check_inert(source)
    namespace = {"__name__": "operations_snippet"}
    exec(compile(source, f"{argv[1]} (python block)", "exec"), namespace)
    verify = namespace.get("verify")
    if not callable(verify):
        sys.exit("the snippet defines no function `verify`")

    ts = str(int(NOW))
    good = sign(SECRET, ts, BODY)
    stale = str(int(NOW) - 301)
    cases = [
        # (what, expected, args, kwargs)
        ("a correctly signed body", True, (SECRET, headers(ts, good), BODY, NOW), {}),
        ("a correctly signed body, header names lower-case", True,
         (SECRET, headers(ts, good, str.lower), BODY, NOW), {}),
        ("a correctly signed body, header names upper-case", True,
         (SECRET, headers(ts, good, str.upper), BODY, NOW), {}),
        ("a correctly signed body, header values as bytes", True,
         (SECRET, {k: v.encode() for k, v in headers(ts, good).items()}, BODY, NOW), {}),
        ("a timestamp 300 s old (the edge of the default skew)", True,
         (SECRET, headers(str(int(NOW) - 300), sign(SECRET, str(int(NOW) - 300), BODY)), BODY, NOW), {}),
        ("a tampered body", False,
         (SECRET, headers(ts, good), BODY.replace(b'"seq":7', b'"seq":8'), NOW), {}),
        ("a body with one byte appended", False, (SECRET, headers(ts, good), BODY + b" ", NOW), {}),
        ("a wrong secret", False, (b"another secret", headers(ts, good), BODY, NOW), {}),
        ("a stale timestamp beyond max_skew", False,
         (SECRET, headers(stale, sign(SECRET, stale, BODY)), BODY, NOW), {}),
        ("a timestamp beyond a smaller max_skew", False,
         (SECRET, headers(str(int(NOW) - 61), sign(SECRET, str(int(NOW) - 61), BODY)), BODY, NOW),
         {"max_skew": 60}),
        ("a timestamp from the future beyond max_skew", False,
         (SECRET, headers(str(int(NOW) + 301), sign(SECRET, str(int(NOW) + 301), BODY)), BODY, NOW), {}),
        ("a timestamp changed after signing", False,
         (SECRET, headers(str(int(NOW) - 1), good), BODY, NOW), {}),
        ("a missing signature header", False, (SECRET, headers(ts, None), BODY, NOW), {}),
        ("a missing timestamp header", False,
         (SECRET, {"X-Agentsessions-Signature": good}, BODY, NOW), {}),
        ("a signature without the sha256= prefix", False,
         (SECRET, headers(ts, good[len("sha256="):]), BODY, NOW), {}),
        ("a signature of another algorithm", False,
         (SECRET, headers(ts, "sha1=" + hmac.new(SECRET, f"{ts}.".encode() + BODY, hashlib.sha1).hexdigest()),
          BODY, NOW), {}),
        ("an empty signature", False, (SECRET, headers(ts, "sha256="), BODY, NOW), {}),
        ("a non-ASCII signature", False, (SECRET, headers(ts, "sha256=é" + good[8:]), BODY, NOW), {}),
        ("a malformed timestamp", False, (SECRET, headers(ts + "x", good), BODY, NOW), {}),
    ]
    failures = []
    for what, expected, args, kwargs in cases:
        try:
            got = verify(*args, **kwargs)
        except Exception as e:  # a verifier must answer False, never raise
            got = f"raised {type(e).__name__}: {e}"
        if got is not expected:
            failures.append(f"{what}: expected {expected}, got {got!r}")
    if failures:
        print(f"{argv[1]}: verify() failed {len(failures)} of {len(cases)} checks:", file=sys.stderr)
        for f in failures:
            print(f"  - {f}", file=sys.stderr)
        return 1
    print(f"{argv[1]}: verify() passed {len(cases)} checks")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
