"""The Nqd-Worker-* headers that name a worker process in nqd's worker
registry (docs/worker-protocol.md): an id of its own, the program's name,
the SDK and its version, the host and the concurrency."""

from __future__ import annotations

import os
import re
import secrets
import socket
import sys
from importlib import metadata
from pathlib import Path


def _id_part(s: str, n: int) -> str:
    """s with what a worker id may not hold replaced by '-', cut to n characters."""
    out = re.sub(r"[^A-Za-z0-9._-]", "-", s).lstrip("-._")[:n]
    return out or "worker"


def _sdk_version() -> str:
    """This package's version: that of the pyproject.toml beside it when it
    runs from its source tree (which no install's metadata describes), else
    that of the installed package."""
    if sys.version_info >= (3, 11):
        import tomllib

        try:
            with (Path(__file__).resolve().parent.parent / "pyproject.toml").open("rb") as f:
                project = tomllib.load(f).get("project")
            if isinstance(project, dict) and project.get("name") == "nqd-worker" and isinstance(project.get("version"), str):
                return str(project["version"])
        except (OSError, ValueError):  # none there, or not TOML
            pass
    try:
        return metadata.version("nqd-worker")
    except metadata.PackageNotFoundError:
        return "unknown"


def self_headers(concurrency: int) -> dict[str, str]:
    """The headers every call of a worker with this concurrency carries."""
    host = socket.gethostname()
    program = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else "python"
    return {
        "Nqd-Worker-Id": f"{_id_part(host, 60)}-{os.getpid()}-{secrets.token_hex(4)}",
        "Nqd-Worker-Name": _id_part(program, 128),
        "Nqd-Worker-Sdk": "python",
        "Nqd-Worker-Version": _sdk_version(),
        "Nqd-Worker-Host": _id_part(host, 128),
        "Nqd-Worker-Concurrency": str(concurrency),
    }
