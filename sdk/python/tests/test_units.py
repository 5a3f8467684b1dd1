"""The worker's pure parts: backoff and lease deadlines."""

from __future__ import annotations

import time
from datetime import datetime, timedelta, timezone

from nqd_worker import Backoff
from nqd_worker.worker import _deadline, _rfc3339


def test_backoff_doubles_with_jitter_up_to_its_cap() -> None:
    b = Backoff(0.1, 1.0)
    ceilings = [0.1, 0.2, 0.4, 0.8, 1.0, 1.0]
    for ceiling in ceilings:
        d = b.next()
        assert ceiling / 2 <= d <= ceiling
    b.reset()
    assert b.next() <= 0.1
    draws = {Backoff(1.0, 1.0).next() for _ in range(20)}
    assert len(draws) > 1  # jittered, not one fixed delay


def test_lease_deadline_from_epoch_ms_and_rfc3339() -> None:
    now = time.time()
    mono = time.monotonic()
    assert abs(_deadline((now + 20) * 1000) - (mono + 20)) < 0.5
    at = (datetime.now(timezone.utc) + timedelta(seconds=12)).isoformat().replace("+00:00", "Z")
    assert abs(_deadline(at) - (mono + 12)) < 0.5
    # Unknown, in the past or absurdly far: bounded to a sane window.
    assert abs(_deadline(None) - (mono + 30)) < 0.5
    assert abs(_deadline("not a time") - (mono + 30)) < 0.5
    assert abs(_deadline((now - 100) * 1000) - (mono + 1)) < 0.5
    assert _deadline((now + 10_000) * 1000) - mono <= 300.5


def test_rfc3339_with_any_fraction() -> None:
    assert _rfc3339("2026-11-26T02:28:36.67Z") == 1795660116.67
    assert _rfc3339("2026-11-26T02:28:36Z") == 1795660116.0
    assert _rfc3339("2026-11-26T03:28:36.123456789+01:00") == 1795660116.123456
    for bad in ("", "2026-11-26", "2026-11-26T02:28:36", "soon"):
        assert _rfc3339(bad) is None
