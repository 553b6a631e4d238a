"""A certificate authority of the test's own and a server certificate it signed for
127.0.0.1, ::1 and INTERNAL_NAME (made with the `openssl` command), for HTTPS servers on
loopback."""

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


@dataclass(frozen=True)
class Certificates:
    ca: Path  # the authority's certificate: what a client must trust
    cert: Path  # the server's certificate, then its key
    key: Path


def make_certificates(folder: Path) -> Certificates:
    """A new authority and a server certificate for 127.0.0.1, ::1 and INTERNAL_NAME, valid
    for two days."""
    folder.mkdir(parents=True, exist_ok=True)
    ca, ca_key = folder / "ca.pem", folder / "ca.key"
    cert, key, request = folder / "server.pem", folder / "server.key", folder / "server.csr"
    extensions = folder / "server.ext"
    extensions.write_text(_SERVER_EXTENSIONS)
    authority = ["-subj", "/CN=git-mgit test CA", "-addext", "basicConstraints=critical,CA:TRUE"]
    for args in (
        ["req", "-x509", *_EC, "-keyout", ca_key, "-out", ca, "-days", "2", *authority],
        ["req", "-new", *_EC, "-keyout", key, "-out", request, "-subj", "/CN=127.0.0.1"],
        ["x509", "-req", "-in", request, "-CA", ca, "-CAkey", ca_key, "-CAcreateserial",
         "-out", cert, "-days", "2", "-extfile", extensions],
    ):  # fmt: skip
        subprocess.run(["openssl", *map(str, args)], check=True, capture_output=True)
    return Certificates(ca, cert, key)
