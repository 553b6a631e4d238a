"""A certificate authority of the test's own, a server certificate it signed for
127.0.0.1, ::1 and INTERNAL_NAME, and a client certificate (made with the `openssl`
command), for HTTPS servers on loopback and the clients they may ask to prove who they are."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

_EC = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes")
# A name no resolver here knows (.test is reserved): only a test's SOCKS proxy reaches it.
INTERNAL_NAME = "lfs.internal.test"
_SERVER_EXTENSIONS = (
    f"subjectAltName=IP:127.0.0.1,IP:::1,DNS:{INTERNAL_NAME}\n"
    "basicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n"
)
_CLIENT_EXTENSIONS = "basicConstraints=CA:FALSE\nextendedKeyUsage=clientAuth\n"


@dataclass(frozen=True)
class Certificates:
    ca: Path  # the authority's certificate: what a client must trust
    cert: Path  # the server's certificate, then its key
    key: Path
    client_cert: Path  # a client's certificate (clientAuth), then its key (no passphrase)
    client_key: Path


def make_certificates(folder: Path) -> Certificates:
    """A new authority, a server certificate for 127.0.0.1, ::1 and INTERNAL_NAME, and a
    client certificate, valid for two days."""
    folder.mkdir(parents=True, exist_ok=True)
    ca, ca_key = folder / "ca.pem", folder / "ca.key"
    authority = ["-subj", "/CN=git-mgit test CA", "-addext", "basicConstraints=critical,CA:TRUE"]
    _openssl("req", "-x509", *_EC, "-keyout", ca_key, "-out", ca, "-days", "2", *authority)
    server = _signed(folder, "server", "127.0.0.1", _SERVER_EXTENSIONS, ca, ca_key)
    client = _signed(folder, "client", "git-mgit test client", _CLIENT_EXTENSIONS, ca, ca_key)
    return Certificates(ca, *server, *client)


def _signed(
    folder: Path, name: str, subject: str, extensions: str, ca: Path, ca_key: Path
) -> tuple[Path, Path]:
    """(certificate, key) of `name`, signed by the authority."""
    cert, key, request = folder / f"{name}.pem", folder / f"{name}.key", folder / f"{name}.csr"
    ext = folder / f"{name}.ext"
    ext.write_text(extensions)
    _openssl("req", "-new", *_EC, "-keyout", key, "-out", request, "-subj", f"/CN={subject}")
    _openssl("x509", "-req", "-in", request, "-CA", ca, "-CAkey", ca_key, "-CAcreateserial",
             "-out", cert, "-days", "2", "-extfile", ext)  # fmt: skip
    return cert, key


def _openssl(*args: str | Path) -> None:
    subprocess.run(["openssl", *map(str, args)], check=True, capture_output=True)
