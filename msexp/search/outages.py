"""What an error says of the study storage: unreachable (a restart or a cut connection,
waited out by `search.patience`), in one line of the server's own words, or not."""

from __future__ import annotations

from msexp.secrets.redaction import redact


class AnswerLost(Exception):
    """Optuna's own retry of a trial's creation, stopped before it creates the trial again:
    the first try may have landed, which `_landed` looks for first."""


def unreachable(exc: BaseException) -> str | None:
    """Why the storage did not answer, in one line, if `exc` (or what caused it) says the
    server cannot be reached or cut the connection; None for any other error."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        reason = str(exc) if isinstance(exc, AnswerLost) else \
            _rpc_unavailable(exc) or _disconnected(exc)
        if reason:
            return reason
        exc = exc.__cause__ or exc.__context__  # type: ignore[assignment]
    return None


def _rpc_unavailable(exc: BaseException) -> str | None:
    code = getattr(exc, "code", None)
    if not callable(code) or not hasattr(exc, "details"):
        return None
    try:
        unavailable = code().name == "UNAVAILABLE"
    except Exception:  # not a gRPC call's error
        return None
    return _line(f"gRPC {exc.details()}") if unavailable else None


def _disconnected(exc: BaseException) -> str | None:
    """A lost or refused database connection (SQLAlchemy's or psycopg's own error)."""
    kinds = {t.__module__.split(".")[0] + "." + t.__name__ for t in type(exc).__mro__}
    if not kinds & {"sqlalchemy.OperationalError", "sqlalchemy.InterfaceError",
                    "psycopg.OperationalError", "psycopg.InterfaceError"} \
            and not getattr(exc, "connection_invalidated", False):
        return None
    cause = getattr(exc, "orig", None) or exc
    return _line(str(cause) or type(cause).__name__)


def _line(text: str) -> str:
    """The last line that says something: psycopg's and gRPC's own words, cut short."""
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return redact(lines[-1] if lines else text)[:200]
