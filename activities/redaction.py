"""Secrets never leave an activity: one redaction, applied where data leaves the worker.

The secrets are the values of the environment variables ``OPENAI_API_KEY`` and
``TEMPORAL_API_KEY``, of those an agent spec lists under ``secrets:`` (the ``secrets`` field of an
activity's input), and any value given to :func:`add_secret_values` (the worker's configured keys).
Each is replaced by ``[REDACTED]`` (values shorter than 4 characters are left alone: they would
match everywhere).

Where it applies, all through :func:`redact`:

* :class:`RedactingInterceptor`, a worker interceptor, on everything an activity hands back to
  Temporal: its result, any exception (turned into an ``ApplicationError`` with the original type
  name and retryability, the message, details and whole cause chain redacted), and heartbeat
  details. While the activity runs, :func:`current` is its redactor, so code that cuts text
  (``ToolRegistry.invoke`` truncating a tool's output) redacts *before* cutting: a secret
  straddling the cut cannot leak in part.
* :class:`RedactingFilter` on every logging handler and :func:`redact_event` in the structlog
  chain (``workers/logging_setup.py``): every log line, the Temporal SDK's own included.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import json
import logging
import os
from collections.abc import Generator, Iterable, MutableMapping
from typing import Any, cast

from pydantic import BaseModel
from temporalio.exceptions import ApplicationError, FailureError
from temporalio.worker import (
    ActivityInboundInterceptor,
    ActivityOutboundInterceptor,
    ExecuteActivityInput,
    Interceptor,
)

REDACTED = "[REDACTED]"
ALWAYS_SECRET = ("OPENAI_API_KEY", "TEMPORAL_API_KEY", "AGENT_CALLBACK_KEY")
"""Environment variables whose values are always secret."""
MIN_SECRET_CHARS = 4

_names: set[str] = set(ALWAYS_SECRET)  # every secret variable name seen in this process
_values: set[str] = set()  # secret values given directly (the worker's configured keys)
_MAX_CAUSES = 20


def add_secret_values(*values: str | None) -> None:
    """Treat these values as secrets in this process (e.g. the API keys a worker was given)."""
    _values.update(v for v in values if v and len(v) >= MIN_SECRET_CHARS)


def add_secret_names(names: Iterable[str]) -> None:
    """Treat the values of these environment variables as secrets in this process from now on."""
    _names.update(n for n in names if isinstance(n, str) and n)  # pyright: ignore[reportUnnecessaryIsInstance] - untyped input


def secret_values(names: Iterable[str] = ()) -> list[tuple[str, str]]:
    """``(label, value)`` of every secret known here plus the variables ``names``.

    The label is the variable's name, or ``a configured key`` for a value given to
    :func:`add_secret_values`; values shorter than 4 characters are left out. For checks that
    must say which secret they found without saying the secret (activities/guardrails).
    """
    all_names = sorted(_names | {n for n in names if isinstance(n, str)})  # pyright: ignore[reportUnnecessaryIsInstance] - untyped input
    found = [(n, os.environ.get(n, "")) for n in all_names]
    found += [("a configured key", v) for v in sorted(_values)]
    return [(label, v) for label, v in found if len(v) >= MIN_SECRET_CHARS]


class Redactor:
    """Replaces a fixed set of secret values in strings and in JSON-like values.

    Args:
        values: the secrets; empty and shorter-than-4-character ones are ignored.
    """

    def __init__(self, values: Iterable[str]) -> None:
        found = {v for v in values if v and len(v) >= MIN_SECRET_CHARS}
        # Longest first, so a secret containing another is replaced whole; plus each secret's
        # JSON-escaped form, to find it inside serialised JSON.
        escaped = {json.dumps(v)[1:-1] for v in found} - found
        self._values = sorted(found | escaped, key=len, reverse=True)

    def __bool__(self) -> bool:
        return bool(self._values)

    def redact(self, text: str) -> str:
        """``text`` with every secret replaced by ``[REDACTED]``."""
        for v in self._values:
            if v in text:
                text = text.replace(v, REDACTED)
        return text

    def contains(self, text: str) -> bool:
        """Whether ``text`` holds any secret."""
        return any(v in text for v in self._values)

    def stable_prefix(self, text: str) -> int:
        """How much of ``text`` can be redacted now, whatever text is appended to it later.

        ``text`` is the beginning of a longer text (a reply being streamed). The returned length
        ends before the last ``len(longest secret) - 1`` characters, where a secret may have begun
        and not be complete yet, and never inside a secret, so ``redact(text[:n])`` is also the
        beginning of the redaction of the whole text and holds no part of a secret.
        """
        if not self._values:
            return len(text)
        cut = max(0, len(text) - (len(self._values[0]) - 1))
        moved = True
        while moved and cut > 0:
            moved = False
            for v in self._values:  # a complete secret across the cut moves the cut to its start
                i = text.find(v, max(0, cut - len(v) + 1))
                if -1 < i < cut:
                    cut, moved = i, True
        return cut

    def value(self, obj: Any) -> Any:
        """``obj`` with secrets redacted in every string inside it (models, dicts, lists).

        A pydantic model without secrets is returned as is; one with secrets is rebuilt from its
        redacted JSON. Other objects are returned unchanged.
        """
        if not self._values:
            return obj
        if isinstance(obj, str):
            return self.redact(obj)
        if isinstance(obj, BaseModel):
            raw = obj.model_dump_json()
            return type(obj).model_validate_json(self.redact(raw)) if self.contains(raw) else obj
        if isinstance(obj, dict):
            return {self.value(k): self.value(v) for k, v in cast("dict[Any, Any]", obj).items()}
        if isinstance(obj, (list, tuple)):
            seq = cast("list[Any] | tuple[Any, ...]", obj)
            return type(seq)(self.value(x) for x in seq)
        return obj


class PieceRedactor:
    """Redacts a text that arrives in pieces (a streamed reply) without leaking a split secret.

    :meth:`add` the pieces as they come; :meth:`take` returns the next redacted text that is safe
    to send, and :meth:`sent` records that it went out. All that is taken and sent, the last
    ``take(final=True)`` included, adds up to ``redactor.redact(whole text)``; a secret split over
    pieces is held back until it is complete and then sent as ``[REDACTED]``.

    Args:
        redactor: the secrets (e.g. :func:`current`).
    """

    def __init__(self, redactor: Redactor) -> None:
        self._r = redactor
        self._raw: list[str] = []
        self._sent = 0

    def add(self, piece: str) -> None:
        """Append the next raw characters."""
        self._raw.append(piece)

    def take(self, final: bool = False) -> str:
        """The redacted text not sent yet; with ``final``, all of it (the text is complete)."""
        full = "".join(self._raw)
        cut = len(full) if final else self._r.stable_prefix(full)
        return self._r.redact(full[:cut])[self._sent :]

    def sent(self, piece: str) -> None:
        """Record that ``piece`` (the last :meth:`take`) was sent."""
        self._sent += len(piece)

    @property
    def sent_chars(self) -> int:
        """Characters of redacted text sent so far."""
        return self._sent


def redactor_for(names: Iterable[str] = ()) -> Redactor:
    """The redactor of the process's secrets plus the values of the variables ``names``."""
    all_names = _names | {
        n
        for n in names
        if isinstance(n, str)  # pyright: ignore[reportUnnecessaryIsInstance] - untyped input
    }
    return Redactor([*(os.environ.get(n, "") for n in all_names), *_values])


_current: contextvars.ContextVar[Redactor | None] = contextvars.ContextVar(
    "agent_redactor", default=None
)


def current() -> Redactor:
    """The running activity's redactor, or the process's (:func:`redactor_for`) outside one."""
    return _current.get() or redactor_for()


@contextlib.contextmanager
def redacting(names: Iterable[str]) -> Generator[Redactor]:
    """Within the block, :func:`current` also redacts the values of the variables ``names``.

    For work one activity does on behalf of another's input: the tool calls a model step runs
    first (``RuntimeActivities.run_first``) carry the spec's ``secrets``, which the step's own
    input does not. The names are added process-wide too (log lines), as for an activity.
    """
    names = [n for n in names if isinstance(n, str)]  # pyright: ignore[reportUnnecessaryIsInstance] - untyped input
    add_secret_names(names)
    r = redactor_for(names)
    token = _current.set(r)
    try:
        yield r
    finally:
        _current.reset(token)


def redact(text: str) -> str:
    """``text`` with every secret known here (see :func:`current`) replaced by ``[REDACTED]``."""
    return current().redact(text)


def redact_error(exc: BaseException, r: Redactor, depth: int = 0) -> ApplicationError:
    """An ``ApplicationError`` carrying ``exc`` with every string redacted.

    The type is the original's (``ApplicationError.type``, or the Python class name), so retry
    policies naming it still apply; retryability, next retry delay and category are kept; the
    ``__cause__`` chain (or the implicit ``__context__``) is converted the same way.
    """
    if isinstance(exc, ApplicationError):
        new = ApplicationError(
            r.redact(exc.message),
            *r.value(list(exc.details)),
            type=exc.type,
            non_retryable=exc.non_retryable,
            next_retry_delay=exc.next_retry_delay,
            category=exc.category,
        )
    else:
        message = exc.message if isinstance(exc, FailureError) else str(exc)
        new = ApplicationError(r.redact(message), type=type(exc).__name__)
    cause = (
        exc.__cause__
        if exc.__cause__ is not None
        else (None if exc.__suppress_context__ else exc.__context__)
    )
    if isinstance(exc, FailureError) and exc.cause is not None:
        cause = exc.cause
    if cause is not None and depth < _MAX_CAUSES:
        new.__cause__ = redact_error(cause, r, depth + 1)
    new.__suppress_context__ = True  # never print the original (unredacted) exception
    new.__traceback__ = exc.__traceback__
    return new


def _secret_names_of(arg: Any) -> list[str]:
    """Secret variable names an activity input carries.

    The spec's ``secrets`` and, for an MCP tool call, the variables its server's settings refer
    to (``${VAR}``).
    """
    secrets: Iterable[Any] = getattr(arg, "secrets", None) or []
    names = [n for n in secrets if isinstance(n, str)]
    mcp = getattr(arg, "mcp", None)
    if mcp is not None:
        from activities.mcp.config import referenced_vars

        names += referenced_vars(mcp.server)
    return names


class _Outbound(ActivityOutboundInterceptor):
    def heartbeat(self, *details: Any) -> None:
        self.next.heartbeat(*current().value(list(details)))


class _Inbound(ActivityInboundInterceptor):
    def init(self, outbound: ActivityOutboundInterceptor) -> None:
        super().init(_Outbound(outbound))

    async def execute_activity(self, input: ExecuteActivityInput) -> Any:
        names = [n for a in input.args for n in _secret_names_of(a)]
        add_secret_names(names)  # so log lines outside the activity redact them too
        r = redactor_for(names)
        token = _current.set(r)
        try:
            return r.value(await self.next.execute_activity(input))
        except asyncio.CancelledError:
            raise
        except FailureError as e:
            if not isinstance(e, ApplicationError):
                raise  # the SDK's own failures (cancelled, terminated) keep their meaning
            raise redact_error(e, r)  # noqa: B904 - the chain is redacted and suppressed
        except Exception as e:  # noqa: BLE001 - every failure leaves redacted
            raise redact_error(e, r)  # noqa: B904
        finally:
            _current.reset(token)


class RedactingInterceptor(Interceptor):
    """Worker interceptor: every activity's result, errors and heartbeats leave redacted."""

    def intercept_activity(self, next: ActivityInboundInterceptor) -> ActivityInboundInterceptor:
        """Wrap the activity's inbound (results, errors) and outbound (heartbeats) calls."""
        return _Inbound(next)


class RedactingFilter(logging.Filter):
    """A logging filter that redacts a record's message, arguments and exception text.

    Install it on handlers (not loggers): a handler's filters see every record it emits,
    whichever logger created it (the Temporal SDK's ``temporalio.*`` loggers included).
    """

    _formatter = logging.Formatter()

    def filter(self, record: logging.LogRecord) -> bool:
        """Redact ``record`` in place; never drops it and never raises.

        Logging runs everywhere, inside workflow code too, where an exception would fail the
        workflow task.
        """
        r = current()
        if not r:
            return True
        try:
            self._redact(record, r)
        except Exception as e:  # noqa: BLE001 - e.g. a message whose %-arguments do not match
            record.msg, record.args = f"unrenderable log record ({type(e).__name__})", None
            record.exc_info = record.exc_text = record.stack_info = None
        return True

    def _redact(self, record: logging.LogRecord, r: Redactor) -> None:
        if isinstance(record.msg, str) or record.args:
            record.msg = r.redact(record.getMessage())
            record.args = None
        if record.exc_info and record.exc_info[0] is not None:
            # Rendered here, redacted; formatters print exc_text when exc_info is gone
            # (logging.Formatter; logging_setup.add_exc_text for the JSON lines).
            record.exc_text = r.redact(self._formatter.formatException(record.exc_info))
            record.exc_info = None
        elif record.exc_text:
            record.exc_text = r.redact(record.exc_text)
        if record.stack_info:
            record.stack_info = r.redact(record.stack_info)
        for key, value in list(vars(record).items()):
            if key not in _STD_ATTRS and isinstance(value, (str, dict, list, tuple)):
                setattr(record, key, r.value(value))


_STD_ATTRS = frozenset(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {"message"}


def redact_event(
    logger: Any, method: str, event: MutableMapping[str, Any]
) -> MutableMapping[str, Any]:
    """Redact every value of a structlog event dict (a processor; after exc formatting)."""
    r = current()
    return r.value(event) if r else event
