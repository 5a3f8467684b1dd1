"""The example handlers run the example flow from examples/flows,
stored as YAML: a Python worker for a flow defined for nqd."""

from __future__ import annotations

import urllib.request
from typing import Any

from conftest import REPO, SDK, Nqd
from helpers import Running

from nqd_worker import Worker, registered
from nqd_worker.cli import load


def test_example_flow_yaml_runs_on_python_steps(nqd: Nqd) -> None:
    yaml = (REPO / "examples" / "flows" / "example-flow.yaml").read_bytes()
    req = urllib.request.Request(
        nqd.url + "/api/_flows/example-flow", data=yaml, method="PUT", headers={"Content-Type": "application/yaml"}
    )
    with urllib.request.urlopen(req, timeout=15) as r:
        assert r.status == 200

    load(str(SDK / "examples" / "example_flow.py"))
    steps = {r.step for r in registered()}
    assert {"fetch_data", "process_data", "await_approval"} <= steps
    w = Worker(nqd.url, queues=["default"], claim_wait=1.0, handlers=registered())

    with Running(w):
        run = nqd.start_run("example-flow", {"url": "https://example.com"})

        def waiting() -> Any:
            items = nqd.ok("GET", "/api/_flows/waits?kind=trigger&flowName=example-flow")["items"]
            return [i for i in items if i["runId"] == run]

        (wait,) = nqd.wait_until("the approval await", waiting)
        nqd.ok("POST", f"/api/_flows/triggers/{wait['triggerId']}", {"approved": True, "by": "ops"})
        assert nqd.wait_status(run) == "completed"

    state = nqd.run_state(run)
    assert state["steps"]["fetch_data"]["attempt"] == 2
    assert state["steps"]["await_approval"]["result"] == {"approved": True, "by": "ops"}
    assert state["state"] == {"processed": 42}
