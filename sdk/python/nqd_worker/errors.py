"""Errors a handler raises and the worker reports."""

from __future__ import annotations


class PermanentError(Exception):
    """Raised by a handler, fails the step without a retry, whatever its retry policy."""


class EncodeError(TypeError):
    """A value of the step cannot be encoded as JSON: a state value, a log's
    meta, an emit's payload, a progress value or the result. Raised where
    the step made it, before anything is sent, and never retried as a call;
    the step fails with its message (whether or not the handler lets it
    through), retried only as its retry policy says."""

    def __init__(self, field: str, cause: BaseException) -> None:
        # What the value was, e.g. "state value 'k'" or "log meta".
        self.field = field
        super().__init__(f"{field} cannot be encoded as JSON: {cause}")


class AuthError(Exception):
    """nqd refused the worker's credentials (401) or their scope (403).

    Worker.run raises it: retrying would not help until the token is fixed.
    """

    def __init__(self, status: int, message: str) -> None:
        self.status = status
        hint = (
            "pass a token with --token, NQD_TOKEN or Worker(token=...)"
            if status == 401
            else "the token needs the write scope"
        )
        super().__init__(f"nqd refused the worker ({status}): {message}; {hint}")


class NqdError(Exception):
    """nqd answered a request with an error that retrying will not fix (4xx)."""

    def __init__(self, status: int, message: str, fields: dict[str, str] | None = None, code: str = "") -> None:
        self.status = status
        # nqd's error code, e.g. "not_found" or "idempotency_key_reused".
        self.code = code
        # The request fields nqd named, by their JSON path.
        self.fields: dict[str, str] = fields or {}
        super().__init__(f"nqd answered {status}: {message}")


class LeaseLost(Exception):
    """The job's lease ended or went to another worker, or its run ended:
    nothing more of this attempt can be reported."""


class JobCanceled(Exception):
    """The run was canceled or ended while the step ran."""
