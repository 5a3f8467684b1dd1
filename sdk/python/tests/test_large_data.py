"""Large step data by reference through the Python SDK: a 10 MB result and
a 10 MB emit payload from a worker, back to a client, on an nqd whose
archive (a directory: the bucket's driver is nqd's concern, tested in Go
against an S3-compatible server) keeps values by reference."""

from __future__ import annotations

import hashlib
import json
import time
import urllib.request
from pathlib import Path
from typing import Any, Callable

from conftest import Nqd
from helpers import Running

from nqd_worker import Client, Context, Worker

SIZE = 10 << 20


def test_ten_megabytes_by_reference(own_nqd: Callable[..., Nqd], tmp_path: Path) -> None:
    srv = own_nqd({"NQ_ARCHIVE_DIR": str(tmp_path / "archive"), "NQ_MAX_BODY_BYTES": str(48 << 20)})
    q = "py-large"
    srv.put_flow(
        q,
        {
            "entry": "ingest",
            "steps": {
                "ingest": {"queue": q, "emits": ["ingested"]},
                "transform": {"queue": q, "subscribes": ["ingested"]},
            },
        },
    )
    big = "0123456789abcdef" * (SIZE // 16)
    got: list[int] = []
    w = Worker(srv.url, queues=[q], claim_wait=1.0, concurrency=1)

    @w.step("ingest", queue=q)
    async def ingest(input: Any, ctx: Context) -> Any:
        assert input["blob"] == big  # the run's input, kept by reference too
        await ctx.flow.emit("ingested", {"blob": big})
        return big

    @w.step("transform", queue=q)
    async def transform(input: Any, ctx: Context) -> Any:
        got.append(len(input["ingested"]["blob"]))
        assert input["ingested"]["blob"] == big
        return {"bytes": len(input["ingested"]["blob"])}

    client = Client(srv.url, timeout=60)
    began = time.monotonic()
    with Running(w):
        run = client.start(q, {"blob": big})
        done = client.wait(run.run_id, timeout=120)
        ingested = client.resolve(client.state(run.run_id)["steps"]["ingest"]["result"])
    took = time.monotonic() - began
    assert got == [len(big)]
    assert ingested == big  # fetched through its reference
    assert done == {"bytes": len(big)}

    # Every other read carries references: the state and the stream.
    st = client.state(run.run_id)
    ref = st["steps"]["ingest"]["result"]["$nqdRef"]
    value = json.dumps(big, separators=(",", ":")).encode()
    assert ref["sha256"] == hashlib.sha256(value).hexdigest() and ref["bytes"] == len(value)
    assert "$nqdRef" in st["input"]
    completions = [
        e for e in client.events(run.run_id, until_end=True) if e.kind == "step.completed" and e.record.get("step") == "ingest"
    ]
    assert completions[0].record["data"]["result"] == {"$nqdRef": ref}
    with urllib.request.urlopen(srv.url + ref["url"], timeout=60) as r:
        assert r.read() == value
    print(f"\n10 MiB input, result and emit through the Python SDK: {took:.2f}s")
