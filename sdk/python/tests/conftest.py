"""Fixtures: an nqd binary built from this repository once per session, and
nqd servers started from it on free ports with their own data directories."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import tomllib
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest

SDK = Path(__file__).resolve().parent.parent
REPO = SDK.parent.parent
sys.path.insert(0, str(SDK))


@pytest.fixture(scope="session")
def nqd_binary(tmp_path_factory: pytest.TempPathFactory) -> Path:
    prebuilt = os.environ.get("NQD_TEST_BINARY")
    if prebuilt:  # an nqd built elsewhere, e.g. from another revision
        return Path(prebuilt).resolve()
    go = shutil.which("go")
    if go is None:
        pytest.fail("go is not on the PATH: the SDK tests build nqd from this repository")
    out = tmp_path_factory.mktemp("bin") / "nqd"
    subprocess.run([go, "build", "-o", str(out), "./cmd/server"], cwd=REPO, check=True)
    return out


def sdk_version() -> str:
    """The version the SDK's packaging metadata gives, the one place it is kept."""
    with (SDK / "pyproject.toml").open("rb") as f:
        return str(tomllib.load(f)["project"]["version"])


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Nqd:
    """One nqd process; restartable on the same port and data directory."""

    def __init__(self, binary: Path, data_dir: Path, env: dict[str, str] | None = None) -> None:
        self.binary = binary
        self.data_dir = data_dir
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.env = dict(env or {})
        self.proc: subprocess.Popen[bytes] | None = None
        self.log = data_dir / "nqd.log"
        # The token tests and API calls use when the server has tokens.
        self.admin_token: str | None = None

    def start(self, timeout: float = 20.0) -> None:
        env = dict(os.environ)
        env.update(
            {
                "NQ_ADDR": f"127.0.0.1:{self.port}",
                "NQ_DATA_DIR": str(self.data_dir),
                "NQ_LOG_LEVEL": "warn",
                "NQ_LOG_FORMAT": "json",
                "NQ_RATE_PER_TOKEN": "0",
                "NQ_RATE_PER_ADDR": "0",
            }
        )
        env.update(self.env)
        with open(self.log, "ab") as logf:
            self.proc = subprocess.Popen([str(self.binary)], env=env, stdout=logf, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"nqd exited with {self.proc.returncode}: {self.log.read_text()[-2000:]}")
            try:
                with urllib.request.urlopen(self.url + "/healthz", timeout=1) as r:
                    if r.status == 200:
                        return
            except (OSError, urllib.error.URLError):
                pass
            time.sleep(0.05)
        raise RuntimeError(f"nqd did not answer /healthz within {timeout}s")

    def kill(self) -> None:
        """kill -9: no shutdown, no flush beyond what was committed."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)

    def call(
        self, method: str, path: str, body: Any = None, token: str | None = None, headers: dict[str, str] | None = None
    ) -> tuple[int, Any]:
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.url + path, data=data, method=method, headers=headers or {})
        req.add_header("Content-Type", "application/json")
        tok = token or self.admin_token
        if tok:
            req.add_header("Authorization", f"Bearer {tok}")
        try:
            with urllib.request.urlopen(req, timeout=15) as r:
                raw = r.read()
                return r.status, json.loads(raw) if raw else None
        except urllib.error.HTTPError as e:
            raw = e.read()
            try:
                return e.code, json.loads(raw)
            except ValueError:
                return e.code, raw.decode()

    def ok(self, method: str, path: str, body: Any = None) -> Any:
        status, doc = self.call(method, path, body)
        assert 200 <= status < 300, f"{method} {path}: {status} {doc}"
        return doc

    def put_flow(self, name: str, definition: dict[str, Any]) -> None:
        self.ok("PUT", f"/api/_flows/{name}", {"name": name, **definition})

    def start_run(self, flow: str, input: Any = None) -> str:
        doc = self.ok("POST", f"/api/_flows/{flow}/start", input if input is not None else {})
        return str(doc["flowId"])

    def events(self, run_id: str) -> list[dict[str, Any]]:
        doc = self.ok("GET", f"/api/_events/flow/{run_id}?limit=1000")
        return list(doc["events"])

    def run_state(self, run_id: str) -> dict[str, Any]:
        doc = self.ok("GET", f"/api/_events/flow/{run_id}/state")
        return dict(doc["state"])

    def lease(self) -> float:
        """The job lease this nqd gives, in seconds, measured on a job of a
        flow of its own: the claim's leaseUntil less the time of the claim."""
        q = "lease-probe"
        self.put_flow(q, {"entry": "probe", "steps": {"probe": {"queue": q}}})
        run = self.start_run(q, {})
        before = time.time()
        (job,) = self.ok("POST", "/api/_workers/claim", {"queues": [q], "max": 1})["jobs"]
        assert job["runId"] == run
        self.ok("POST", f"/api/_workers/jobs/{q}/{job['id']}/complete", {"lease": job["lease"]})
        return round(float(job["leaseUntil"]) / 1000 - before, 1)

    def wait_until(self, what: str, cond: Callable[[], Any], timeout: float = 20.0) -> Any:
        deadline = time.monotonic() + timeout
        while True:
            got = cond()
            if got:
                return got
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out after {timeout}s waiting for {what}")
            time.sleep(0.05)

    def wait_status(self, run_id: str, statuses: tuple[str, ...] = ("completed", "failed"), timeout: float = 20.0) -> str:
        def ended() -> str | None:
            st = self.run_state(run_id).get("status")
            return str(st) if st in statuses else None

        try:
            return str(self.wait_until(f"run {run_id} to be {'/'.join(statuses)}", ended, timeout))
        except AssertionError:
            kinds = [(e.get("kind"), e.get("step"), e.get("data")) for e in self.events(run_id)]
            raise AssertionError(f"run {run_id} did not end within {timeout}s; its events: {kinds}") from None


@pytest.fixture(params=["channel", "http"])
def transport(request: pytest.FixtureRequest) -> str:
    """The worker's transport: a test that takes it runs over both."""
    return str(request.param)


@pytest.fixture(scope="session")
def nqd(nqd_binary: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Nqd]:
    """An nqd on the embedded store, shared by the tests (each uses flows and
    queues of its own)."""
    srv = Nqd(nqd_binary, tmp_path_factory.mktemp("nqd-data"))
    srv.start()
    yield srv
    srv.stop()


@pytest.fixture(scope="session")
def short_lease_nqd(nqd_binary: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Nqd]:
    """An nqd whose job leases last 5 s (NQ_JOB_LEASE) where nqd has that
    setting; Nqd.lease() says what it got."""
    srv = Nqd(nqd_binary, tmp_path_factory.mktemp("nqd-short-lease"), {"NQ_JOB_LEASE": "5s"})
    srv.start()
    yield srv
    srv.stop()


@pytest.fixture(scope="session")
def redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A throwaway redis-server on a free port; the test is skipped without
    one, unless NQD_REQUIRE_REDIS=1 (CI) makes that a failure."""
    exe = shutil.which("redis-server")
    if exe is None:
        if os.environ.get("NQD_REQUIRE_REDIS") == "1":
            pytest.fail("redis-server is not on the PATH and NQD_REQUIRE_REDIS=1")
        pytest.skip("redis-server is not on the PATH")
    port = free_port()
    d = tmp_path_factory.mktemp("redis")
    args = [exe, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", str(d)]
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1) as c:
                    c.sendall(b"PING\r\n")
                    if c.recv(16).startswith(b"+PONG"):
                        break
            except OSError:
                pass
            if time.monotonic() > deadline or proc.poll() is not None:
                raise RuntimeError("redis-server did not start")
            time.sleep(0.05)
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        proc.terminate()
        proc.wait(10)


@pytest.fixture
def own_nqd(nqd_binary: Path, tmp_path: Path) -> Iterator[Callable[..., Nqd]]:
    """Starts nqd processes of the test's own (with extra environment)."""
    started: list[Nqd] = []

    def make(env: dict[str, str] | None = None) -> Nqd:
        d = tmp_path / f"nqd-{len(started)}"
        d.mkdir()
        srv = Nqd(nqd_binary, d, env)
        started.append(srv)
        srv.start()
        return srv

    yield make
    for srv in started:
        srv.stop()
