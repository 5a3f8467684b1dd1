"""The Nuxt Queue config mapping against the cases every SDK shares
(sdk/testdata/nuxt-configs: configs in, flow definitions and triggers out),
so that the Python and the TypeScript packages map configs the same way."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from nqd_worker.cli import build_flows

CASES = Path(__file__).resolve().parents[2] / "testdata" / "nuxt-configs"


def load(name: str) -> Any:
    return json.loads((CASES / name).read_text())


def test_every_case_is_checked() -> None:
    assert sorted(p.name.removesuffix(".in.json") for p in CASES.glob("*.in.json")) == ["october-2025", "v0.5"]


@pytest.mark.parametrize("case", ["october-2025", "v0.5"])
def test_the_shared_case_maps_as_its_out_file_says(case: str) -> None:
    files = load(f"{case}.in.json")["files"]
    built = build_flows([(f["id"], f["config"]) for f in files])
    got = {"flows": sorted(built.flows, key=lambda d: str(d["name"])), "triggers": built.triggers}
    # Through JSON, as nqd gets it.
    assert json.loads(json.dumps(got)) == load(f"{case}.out.json")


def test_what_nqd_cannot_take_of_v05_is_said() -> None:
    files = load("v0.5.in.json")["files"]
    assert build_flows([(f["id"], f["config"]) for f in files]).warnings == [
        "test/step-2: awaitBefore: a schedule await has no nqd equivalent; dropped"
    ]
