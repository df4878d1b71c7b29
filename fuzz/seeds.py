#!/usr/bin/env python3
"""Writes the hand-made seed inputs into fuzz/corpus/<target>/.

The structured targets decode their input byte by byte (the layouts are
documented on `Op::decode` in machine/src/fuzzing/approval.rs and on the
decoders in stream.rs and acts.rs), so the protocol's interesting paths can
be spelled out here instead of waiting for the fuzzer to stumble on them.
Files are named `seed-<what>`; entries the fuzzer found are named by hash.
Run from the repository root: `python3 fuzz/seeds.py`.
"""

import os
import shutil

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus")
FIXTURES = os.path.join(os.path.dirname(__file__), "..", "..", "shared", "fixtures", "go-v0.1.2")


def write(target, name, data):
    d = os.path.join(ROOT, target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "seed-" + name), "wb") as f:
        f.write(bytes(data))


# --- approval_protocol: op = [tag, p, ...] -------------------------------
PUPPET, APPROVAL, PUPPET_MEM, TOOLS = 0, 2, 3, 4


def exec_(session=0, route=PUPPET, inp=True, deadline=False, expected=None):
    flags = (1 if inp else 0) | (2 if deadline else 0) | (4 if expected is not None else 0)
    return [0, session, route, flags, expected or 0]


def approve(session=0, gate=0, right=True, approved=True, tamper=0, reason=True, identity=False):
    t = 4 if right else tamper
    flags = 1 | (2 if approved else 0) | (4 if reason else 0) | (8 if identity else 0)
    return [1, session, gate, t, flags]


def approve_missing(session=0):
    return [1, session, 0, 4, 4]


def resume(s=0):
    return [2, s]


def suspend(s=0):
    return [3, s]


def replay(s=0, harness=False):
    return [4, s, 1 if harness else 0]


def get(s=0):
    return [5, s]


def act_tool(i=0, mediation=3, keyed=True):
    return [0, i, mediation if keyed else 128 + mediation]


ACT_MODEL, ACT_OUTPUT, ACT_USAGE = [1, 0, 0], [2, 0, 0], [3, 0, 0]
ACT_END, ACT_ACK = [5, 1, 0], [6, 0, 0]


def act_report(i=0, receipt=False):
    return [4, i, 1 if receipt else 0]


def act_forged(what, delta=1):
    return [7, what, delta & 0xFF]


def act_host_owned(what, approved=True):
    return [8, what, 1 if approved else 0]


OPEN, CLOSE, FAIL = 0, 1, 2


def plan(acts, then):
    return [6, 0, len(acts)] + [b for a in acts for b in a] + [then]


def inject(conn, act, then=OPEN):
    return [7, conn] + act + [then]


def fault(kind, q=0):
    return [8, kind, q]


def advance(seconds):
    return [9, seconds]


def cancel(call=0):
    return [10, call]


RESTART = [11, 0]

A = "approval_protocol"
flows = {
    "park": exec_(),
    "approve-resume": exec_() + approve() + resume() + get(),
    "approve-exec-recovers": exec_() + approve() + exec_(inp=False) + replay(),
    "deny-resume": exec_() + approve(approved=False) + resume() + replay(harness=True),
    "approve-twice": exec_() + approve() + approve() + resume(),
    "approve-conflict": exec_() + approve() + approve(approved=False) + resume(),
    "deny-then-approve": exec_() + approve(approved=False) + approve() + resume(),
    "approve-after-receipt": exec_() + approve() + resume() + approve(),
    "wrong-exec": exec_() + approve(right=False, tamper=0) + resume(),
    "wrong-call": exec_() + approve(right=False, tamper=1 + 8 * 1) + resume(),
    "wrong-seq": exec_() + approve(right=False, tamper=2 + 8 * 17) + resume(),
    "empty-exec": exec_() + approve(right=False, tamper=3) + resume(),
    "missing-decision": exec_() + approve_missing() + resume(),
    "identity": exec_() + approve(identity=True) + approve(identity=False) + resume(),
    "static-approval": exec_(route=APPROVAL) + approve() + resume() + replay(harness=True),
    "memory-harness": exec_(route=PUPPET_MEM) + approve() + resume(),
    "tools": exec_(route=TOOLS) + replay(harness=True),
    "exec-while-parked": exec_() + exec_(inp=True) + approve() + exec_(inp=True),
    "suspend-parked": exec_() + suspend() + approve() + resume(),
    "restart-resume": exec_() + approve() + RESTART + resume() + get(),
    "forged-exec": plan([act_tool()], OPEN) + plan([act_forged(0)], CLOSE) + exec_() + resume(),
    "forged-call": plan([act_tool()], OPEN) + plan([act_forged(1)], CLOSE) + exec_(),
    "forged-seq": plan([act_tool()], OPEN) + plan([act_forged(2, 0xFF)], CLOSE) + exec_(),
    "ack-no-close": plan([act_tool()], OPEN) + plan([ACT_ACK], OPEN) + exec_() + advance(200),
    "ack-extra": plan([act_tool()], OPEN) + plan([ACT_ACK, ACT_OUTPUT], CLOSE) + exec_(),
    "close-before-ack": plan([act_tool()], OPEN) + plan([], CLOSE) + exec_() + resume(),
    "fail-before-ack": plan([act_tool()], OPEN) + plan([], FAIL) + exec_() + resume(),
    "harness-decides": plan([act_tool(), act_host_owned(0)], OPEN) + exec_() + resume(),
    "harness-requests": plan([act_host_owned(1)], CLOSE) + exec_(),
    "harness-start": plan([act_host_owned(2)], CLOSE) + exec_(),
    "reused-call-id": plan([act_tool(0, 2), act_tool(0, 3)], OPEN) + exec_() + approve() + resume(),
    "report-gated": exec_() + approve() + plan([act_tool()], OPEN)
    + plan([act_report(0)], CLOSE) + resume(),
    "report-receipt": plan([act_report(1, True), ACT_END], CLOSE) + exec_(),
    "two-gates": plan([act_tool(0), act_tool(1)], OPEN) + exec_() + approve() + resume()
    + approve(gate=1) + resume(),
    "inject-ack": plan([act_tool()], OPEN) + plan([], OPEN) + exec_() + inject(0, ACT_ACK, CLOSE)
    + approve() + resume(),
    "inject-forged": plan([act_tool()], OPEN) + plan([], OPEN) + exec_()
    + inject(0, act_forged(2, 3), CLOSE),
    "inject-stale": exec_() + inject(9, ACT_ACK, CLOSE) + approve() + resume(),
    "deadline": plan([act_tool()], OPEN) + plan([], OPEN) + exec_(deadline=True) + advance(5)
    + resume(),
    "cancel": plan([act_tool()], OPEN) + plan([], OPEN) + exec_() + cancel() + resume(),
    "append-fault": exec_() + fault(0, 2 + 4 * 2) + approve() + resume() + resume(),
    "tool-fault": exec_() + approve() + fault(9) + resume() + resume(),
    "tool-lost": exec_() + approve() + fault(10) + resume() + resume(),
    "snapshot-fault": exec_() + fault(4) + exec_() + approve() + resume(),
    "dial-fault": exec_() + approve() + fault(6) + resume() + resume(),
    "expected-seq": exec_(expected=0) + approve() + exec_(inp=False, expected=1),
    "two-sessions": exec_() + exec_(session=1) + approve(session=1) + approve(session=0)
    + resume(1) + resume(0),
}
for name, data in flows.items():
    write(A, name, data)

# --- harness_stream: header [follow, flags, inputs], then frames ----------
LIVE, REPLAY, RESUME = 0, 1, 2
H = "harness_stream"


def frame(act):
    # Input tag 0..=9 selects an action; its own three bytes follow.
    return [act[0]] + act


CLOSED, FAILED, ABORT = [11], [12], [13]
OK_APPEND, OK = [0], [0]  # answers: complete (schedule byte) and no fault
DONE = [0, 0]  # schedule: complete, fault byte: none

streams = {
    "echo": [LIVE, 0, 1] + frame(ACT_MODEL) + DONE + DONE + DONE + frame(ACT_END) + DONE,
    "echo-replay": [REPLAY, 0, 1] + frame(ACT_MODEL) + DONE * 3 + frame(ACT_END) + DONE
    + frame(ACT_MODEL) + frame(ACT_END),
    "echo-resume-cut": [RESUME, 0, 1] + frame(ACT_MODEL) + DONE * 3 + frame(ACT_END) + DONE
    + [2, 0] + frame(ACT_MODEL) + DONE * 3 + frame(ACT_END) + DONE,
    "tool": [LIVE, 0, 0] + frame(act_tool(0, 2)) + DONE * 3 + frame(ACT_OUTPUT) + DONE
    + frame(ACT_END) + DONE,
    "park": [LIVE, 0, 1] + frame(act_tool()) + DONE + frame(ACT_ACK) + CLOSED,
    "park-approve-resume": [RESUME, 0, 1] + frame(act_tool()) + DONE + frame(ACT_ACK) + CLOSED
    + [255, 3] + frame(act_tool()) + DONE * 3 + frame(ACT_END) + DONE,
    "park-deny-resume": [RESUME, 0, 1] + frame(act_tool()) + DONE + frame(ACT_ACK) + CLOSED
    + [255, 1] + frame(act_tool()) + DONE * 3 + frame(ACT_END) + DONE,
    "park-forged": [LIVE, 0, 0] + frame(act_tool()) + DONE + frame(act_forged(2)) + CLOSED,
    "park-no-memory": [LIVE, 1, 0] + frame(act_tool()) + DONE,
    "no-executor": [LIVE, 2, 0] + frame(act_tool(0, 2)) + DONE * 3,
    "host-owned": [LIVE, 0, 0] + frame(act_host_owned(0)) + DONE + frame(act_host_owned(2)),
    "report": [LIVE, 0, 0] + frame(act_report(0)) + DONE + frame(act_report(1, True)) + DONE,
    "tool-replay": [REPLAY, 0, 0] + frame(act_tool(0, 2)) + DONE * 3 + frame(ACT_OUTPUT) + DONE
    + frame(ACT_END) + DONE + frame(act_tool(0, 2)) + frame(ACT_OUTPUT) + frame(ACT_END),
    "usage": [LIVE, 0, 2] + frame(ACT_USAGE) + DONE + frame(ACT_END) + DONE,
    "append-lost": [RESUME, 0, 0] + frame(ACT_MODEL) + [0, 15] + DONE + frame(ACT_END) + DONE,
    "model-fails": [LIVE, 0, 0] + frame(ACT_MODEL) + [0, 0] + [0, 7] + DONE,
    "abort-mid": [LIVE, 0, 0] + frame(ACT_MODEL) + [3] + ABORT + DONE + DONE,
    "interleave": [LIVE, 0, 0] + frame(ACT_MODEL) + [3] + frame(ACT_OUTPUT) + [3]
    + frame(ACT_END) + DONE * 4,
    "failed-stream": [LIVE, 0, 0] + FAILED + DONE,
    "raw": [LIVE, 0, 0] + [10, 1, 3, 1, 2, 3] + DONE,
}
for name, data in streams.items():
    write(H, name, data)

# --- journal_verify: the Go fixtures as they are, plus a few shapes ---------
J = "journal_verify"
if os.path.isdir(FIXTURES):
    for f in sorted(os.listdir(FIXTURES)):
        d = os.path.join(ROOT, J)
        os.makedirs(d, exist_ok=True)
        dst = os.path.join(d, "seed-go-" + f)
        shutil.copyfile(os.path.join(FIXTURES, f), dst)
        os.chmod(dst, 0o644)
for i, data in enumerate([b"null", b"[]", b"[{}]", b'[{"Seq":1}]', b"[1]", b"{"]):
    write(J, "json-%d" % i, list(data))
write(J, "protobuf-empty", [0])
write(J, "protobuf-record", [3, 0x08, 0x01, 0x12, 0x00, 0x1A, 0x00])
for i in range(6):
    write(J, "tampered-%d" % i, [1] + [(i * 37 + k * 11) & 0xFF for k in range(48)])

# --- canonical and input_hash: varied byte patterns ------------------------
for target, n in (("canonical", 12), ("input_hash", 12)):
    for i in range(n):
        write(target, "bytes-%d" % i, [(i * 53 + k * (i + 3)) & 0xFF for k in range(16 + 8 * i)])
