"""A grpcio client that probes a Sessions host's TLS and credentials.

It makes its own PKI and JWTs (cryptography, PyJWT), so neither the
certificates nor the tokens come from the Rust stack under test.

    python auth_matrix.py pki DIR
        Writes ca.pem; server.pem/.key (localhost, 127.0.0.1); client
        certificates client-a (SAN URI spiffe://example/agent-1),
        client-b (spiffe://example/stranger), both from ca.pem, and
        client-x (spiffe://example/agent-1) from another CA; JWT signing
        keys es.key (P-256), rs.key (RSA 2048) and other-es.key; and
        jwks.json with the public halves of es.key (kid "es") and rs.key
        (kid "rs").

    python auth_matrix.py run SPEC.json
        Runs each case of the spec on a fresh channel and prints one JSON
        line per case: {"name", "code", "details"}.

A case: {"name", "rpc", "request": {...proto3 JSON...}, "cert": "a" | "b" |
"x" | "none", "plaintext": bool, "token": null | "<raw>" | {"jwt": {...}}}.
A JWT spec: {"alg": "ES256" | "RS256" | "none" | "HS256-with-public-key",
"key": "es" | "rs" | "other-es", "kid": "<kid>" | null, "claims": {...}
(null deletes a default claim), "exp_in": seconds, "nbf_in": seconds,
"tamper": bool}. Default claims: iss and aud from the spec, sub "jwt-user",
exp in 300 s.
"""

import base64
import datetime
import hashlib
import hmac
import ipaddress
import json
import os
import sys
import time

import grpc
import jwt
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import NameOID
from google.protobuf import json_format

import session_pb2
import session_pb2_grpc


def pem_key(key) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def cert(subject_cn, issuer_cert, issuer_key, key, *, ca=False, sans=()):
    now = datetime.datetime.now(datetime.timezone.utc)
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject_cn)])
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer_cert.subject if issuer_cert else subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    )
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName(list(sans)), critical=False)
    return builder.sign(issuer_key, hashes.SHA256())


def write(path, data: bytes) -> None:
    with open(path, "wb") as f:
        f.write(data)


def b64u(n: int, size: int = 0) -> str:
    raw = n.to_bytes(size or (n.bit_length() + 7) // 8, "big")
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def pki(out: str) -> None:
    os.makedirs(out, exist_ok=True)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = cert("matrix CA", None, ca_key, ca_key, ca=True)
    other_key = ec.generate_private_key(ec.SECP256R1())
    other = cert("other CA", None, other_key, other_key, ca=True)
    write(f"{out}/ca.pem", ca.public_bytes(serialization.Encoding.PEM))
    server_key = ec.generate_private_key(ec.SECP256R1())
    server = cert(
        "localhost",
        ca,
        ca_key,
        server_key,
        sans=[x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))],
    )
    write(f"{out}/server.pem", server.public_bytes(serialization.Encoding.PEM))
    write(f"{out}/server.key", pem_key(server_key))
    for name, issuer, issuer_key, uri in [
        ("client-a", ca, ca_key, "spiffe://example/agent-1"),
        ("client-b", ca, ca_key, "spiffe://example/stranger"),
        ("client-x", other, other_key, "spiffe://example/agent-1"),
    ]:
        key = ec.generate_private_key(ec.SECP256R1())
        c = cert(name, issuer, issuer_key, key, sans=[x509.UniformResourceIdentifier(uri)])
        write(f"{out}/{name}.pem", c.public_bytes(serialization.Encoding.PEM))
        write(f"{out}/{name}.key", pem_key(key))
    es = ec.generate_private_key(ec.SECP256R1())
    rs = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    other_es = ec.generate_private_key(ec.SECP256R1())
    write(f"{out}/es.key", pem_key(es))
    write(f"{out}/rs.key", pem_key(rs))
    write(f"{out}/other-es.key", pem_key(other_es))
    write(
        f"{out}/rs.pub.pem",
        rs.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        ),
    )
    ep = es.public_key().public_numbers()
    rp = rs.public_key().public_numbers()
    jwks = {
        "keys": [
            {"kty": "EC", "crv": "P-256", "kid": "es", "alg": "ES256", "use": "sig",
             "x": b64u(ep.x, 32), "y": b64u(ep.y, 32)},
            {"kty": "RSA", "kid": "rs", "alg": "RS256", "use": "sig", "n": b64u(rp.n), "e": b64u(rp.e)},
        ]
    }
    write(f"{out}/jwks.json", json.dumps(jwks).encode())


def make_jwt(spec: dict, case_jwt: dict, keys: str) -> str:
    now = int(time.time())
    claims = {"iss": spec["issuer"], "aud": spec["audience"], "sub": "jwt-user", "exp": now + 300}
    if "exp_in" in case_jwt:
        claims["exp"] = now + case_jwt["exp_in"]
    if "nbf_in" in case_jwt:
        claims["nbf"] = now + case_jwt["nbf_in"]
    for k, v in case_jwt.get("claims", {}).items():
        if v is None:
            claims.pop(k, None)
        else:
            claims[k] = v
    headers = {}
    if case_jwt.get("kid") is not None:
        headers["kid"] = case_jwt["kid"]
    alg = case_jwt["alg"]
    if alg == "none":
        token = jwt.encode(claims, None, algorithm="none", headers=headers)
    elif alg == "HS256-with-public-key":
        # The classic confusion: an HMAC "signed" with the RSA public key.
        secret = open(f"{keys}/rs.pub.pem", "rb").read()
        head = base64.urlsafe_b64encode(json.dumps({"alg": "HS256", "typ": "JWT", **headers}).encode()).rstrip(b"=")
        body = base64.urlsafe_b64encode(json.dumps(claims).encode()).rstrip(b"=")
        sig = hmac.new(secret, head + b"." + body, hashlib.sha256).digest()
        token = (head + b"." + body + b"." + base64.urlsafe_b64encode(sig).rstrip(b"=")).decode()
    else:
        key = open(f"{keys}/{case_jwt['key']}.key", "rb").read()
        token = jwt.encode(claims, key, algorithm=alg, headers=headers)
    if case_jwt.get("tamper"):
        head, body, sig = token.split(".")
        claims["sub"] = "someone-else"
        forged = base64.urlsafe_b64encode(json.dumps(claims).encode()).rstrip(b"=").decode()
        token = f"{head}.{forged}.{sig}"
    return token


REQUESTS = {
    "CreateSession": session_pb2.CreateSessionRequest,
    "GetSession": session_pb2.GetSessionRequest,
    "ListSessions": session_pb2.ListSessionsRequest,
    "DeleteSession": session_pb2.DeleteSessionRequest,
    "Exec": session_pb2.ExecRequest,
    "Replay": session_pb2.ReplayRequest,
    "Approve": session_pb2.ApproveRequest,
    "Cancel": session_pb2.CancelRequest,
    "Suspend": session_pb2.SuspendRequest,
    "Resume": session_pb2.ResumeRequest,
    "Fork": session_pb2.ForkRequest,
}
STREAMS = {"Exec", "Replay"}


def channel(spec: dict, case: dict) -> grpc.Channel:
    if case.get("plaintext"):
        return grpc.insecure_channel(spec["address"])
    keys = spec["dir"]
    root = open(f"{keys}/ca.pem", "rb").read()
    name = case.get("cert", "a")
    if name == "none":
        creds = grpc.ssl_channel_credentials(root_certificates=root)
    else:
        creds = grpc.ssl_channel_credentials(
            root_certificates=root,
            private_key=open(f"{keys}/client-{name}.key", "rb").read(),
            certificate_chain=open(f"{keys}/client-{name}.pem", "rb").read(),
        )
    return grpc.secure_channel(spec["address"], creds)


def run_case(spec: dict, case: dict) -> dict:
    token = case.get("token")
    if isinstance(token, dict):
        token = make_jwt(spec, token["jwt"], spec["dir"])
    metadata = []
    if case.get("authorization") is not None:
        metadata.append(("authorization", case["authorization"]))
    elif token is not None:
        metadata.append(("authorization", f"Bearer {token}"))
    rpc = case["rpc"]
    request = json_format.ParseDict(case.get("request", {}), REQUESTS[rpc]())
    with channel(spec, case) as ch:
        stub = session_pb2_grpc.SessionsStub(ch)
        call = getattr(stub, rpc)
        try:
            if rpc in STREAMS:
                for _ in call(request, metadata=metadata, timeout=15):
                    pass
            else:
                call(request, metadata=metadata, timeout=15)
            return {"name": case["name"], "code": "OK", "details": ""}
        except grpc.RpcError as e:
            return {"name": case["name"], "code": e.code().name, "details": e.details() or ""}


def main() -> None:
    if sys.argv[1] == "pki":
        pki(sys.argv[2])
        return
    spec = json.load(open(sys.argv[2]))
    for case in spec["cases"]:
        print(json.dumps(run_case(spec, case)), flush=True)


if __name__ == "__main__":
    main()
