"""Certificates for the double's HTTPS mode, made with the openssl command: a server certificate
for 127.0.0.1, and a user certificate + key in one PEM file standing in for an X509 proxy
(panda-client presents ``X509_USER_PROXY`` as its client certificate)."""

from __future__ import annotations

import ssl
import subprocess
from pathlib import Path

USER_DN = "/DC=ch/DC=cern/OU=Organic Units/OU=Users/CN=jtester/CN=Jane Tester"


def _openssl(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True, timeout=60)


def make_certificates(folder: Path) -> dict[str, Path]:
    """server.crt/server.key (CN and SAN 127.0.0.1) and proxy.pem (user cert + key)."""
    folder.mkdir(parents=True, exist_ok=True)
    crt, key, proxy = folder / "server.crt", folder / "server.key", folder / "proxy.pem"
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-keyout", str(key),
             "-out", str(crt), "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1")
    user_key, user_crt = folder / "user.key", folder / "user.crt"
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-keyout",
             str(user_key), "-out", str(user_crt), "-subj", USER_DN)
    proxy.write_text(user_crt.read_text() + user_key.read_text())
    proxy.chmod(0o600)
    return {"crt": crt, "key": key, "proxy": proxy, "user_crt": user_crt}


def server_context(certs: dict[str, Path]) -> ssl.SSLContext:
    """TLS for the server; a client certificate is required and must be the test user's."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(str(certs["crt"]), str(certs["key"]))
    ctx.verify_mode = ssl.CERT_REQUIRED
    ctx.load_verify_locations(cafile=str(certs["user_crt"]))
    return ctx


def user_from_certificate(cert: dict | None) -> str | None:
    """The last CN of the client certificate's subject, as PanDA's clean user name uses it."""
    if not cert:
        return None
    cns = [value for rdn in cert.get("subject", ()) for key, value in rdn if key == "commonName"]
    return cns[-1] if cns else None
