"""Defensive decoding of what clients send: the start input, signal and update payloads.

The start input arrives as a :class:`temporalio.common.RawValue` (decoded here, so bytes of any
encoding end the run cleanly); signals and the update take ``*args`` (so no count of payloads
fails the workflow task) whose payloads the SDK decodes as plain JSON data. Either way the
payload is validated here, so one that is missing, ``null``, of the wrong type or invalid never
fails a workflow task (the SDK would otherwise fail the task on every attempt and the run would
wedge). The caller turns the returned problem into the right outcome: a failed run (start input),
an ignored signal (``state.ignored_signals``) or a refused update (docs/contract.md, "Any Temporal
client is a first-class client"). Valid payloads decode to the same models as before, so stored
histories replay unchanged.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any, TypeVar, cast

from pydantic import BaseModel, ValidationError
from temporalio import workflow
from temporalio.api.common.v1 import Payload
from temporalio.common import RawValue
from temporalio.contrib.pydantic import PydanticPayloadConverter, pydantic_data_converter

M = TypeVar("M", bound=BaseModel)

PROBLEM_MAX = 600
"""Longest problem text kept (characters): it goes into the run's state and history."""


@dataclasses.dataclass(frozen=True)
class Undecodable:
    """A payload the converter could not decode (bytes that are not JSON, an unknown encoding).

    :class:`SignalSafePayloadConverter` hands one to a handler in place of the value, so the
    handler can record why the signal changed nothing instead of the SDK dropping it unseen.
    """

    problem: str
    encoding: str = ""


class SignalSafePayloadConverter(PydanticPayloadConverter):
    """The pydantic payload converter, whose hint-less decoding never raises.

    Each payload decoded without a type hint that cannot be decoded becomes an
    :class:`Undecodable`.

    Signal and update handlers take ``*args`` (no type hints), so the SDK decodes their payloads
    with no hint; a signal whose bytes are not JSON or whose encoding no converter knows was
    dropped by the SDK with only a log line ("dropping the signal"), and a person who sent a
    decision from another language could not learn it was lost (issue #19). Decoding with a type
    hint (activity results, the start input as ``RawValue``, typed client calls) is unchanged.
    """

    def from_payloads(
        self, payloads: Sequence[Payload], type_hints: list[type] | None = None
    ) -> list[Any]:
        """As the pydantic converter; without ``type_hints`` a failure gives an Undecodable."""
        if type_hints is not None:
            return super().from_payloads(payloads, type_hints)
        out: list[Any] = []
        for p in payloads:
            try:
                out.extend(super().from_payloads([p], None))
            except Exception as e:  # noqa: BLE001 - the sender's bytes: reported, never raised
                enc = p.metadata.get("encoding", b"").decode(errors="replace")[:80]
                out.append(Undecodable(f"{type(e).__name__}: {str(e)[:300]}", enc))
        return out


signal_safe_data_converter = dataclasses.replace(
    pydantic_data_converter, payload_converter_class=SignalSafePayloadConverter
)
"""``pydantic_data_converter`` with :class:`SignalSafePayloadConverter`: the base of every
converter the runtime builds (workers/payloads/converter.py, the test environments, the
replayer)."""


class Invalid(BaseModel):
    """Why a payload could not be decoded, and what could be read of who sent it."""

    problem: str
    principal_id: str = "unknown"
    tool_call_id: str | None = None


def decode(raw: Any, model: type[M], what: str) -> M | Invalid:
    """Decode one payload into ``model``, or say why it cannot be.

    Args:
        raw: a :class:`RawValue` (the handler's argument), ``None`` when the client sent no
            payload at all, or an already-decoded ``model`` instance (a subclass that declared the
            model as its type hint).
        model: the pydantic model the payload must validate as.
        what: names the payload in the problem text (``"signal approve"``).

    Returns:
        The model instance, or :class:`Invalid` with a one-line problem (at most ``PROBLEM_MAX``
        characters) and the sender's ``principal_id`` / ``tool_call_id`` when the payload has them.
    """
    if isinstance(raw, model):
        return raw
    if raw is None:
        return Invalid(problem=f"{what}: no payload; expected {_shape(model)}")
    if not isinstance(raw, RawValue):
        return _validate_plain(raw, model, what)
    try:
        value = workflow.payload_converter().from_payload(raw.payload, model)
    except ValidationError as e:
        return _invalid(what, model, validation_problems(e), _loose(raw))
    except Exception as e:  # undecodable bytes, unknown encoding: still the client's input
        return _invalid(what, model, f"cannot be decoded ({type(e).__name__}: {e})", _loose(raw))
    if not isinstance(value, model):  # e.g. a "binary/null" payload decodes to None
        return _invalid(what, model, f"is {_kind(value)}", value)
    return value


def decode_args(args: tuple[Any, ...], model: type[M], what: str) -> M | Invalid:
    """:func:`decode` for a handler declared ``(*args)``: exactly one payload is expected.

    Signals and the update take ``*args`` so that no count of payloads a client sends can fail
    the workflow task (a fixed parameter list raises ``TypeError`` on a second payload); the SDK
    then decodes each payload as plain JSON data, and with :class:`SignalSafePayloadConverter` a
    payload it cannot decode arrives as an :class:`Undecodable`, reported here.
    """
    for a in args:
        if isinstance(a, Undecodable):
            enc = f" (encoding {a.encoding!r})" if a.encoding else ""
            return _invalid(what, model, f"cannot be decoded{enc}: {a.problem}", None)
    if len(args) > 1:
        return _invalid(what, model, f"{len(args)} payloads, not one", args[0])
    if args and args[0] is None:
        return _invalid(what, model, "is null", None)
    return decode(args[0] if args else None, model, what)


def _validate_plain(raw: Any, model: type[M], what: str) -> M | Invalid:
    if not isinstance(raw, dict):
        return _invalid(what, model, f"is {_kind(raw)}", raw)
    try:
        return model.model_validate(raw)
    except ValidationError as e:
        return _invalid(what, model, validation_problems(e), raw)


def _invalid(what: str, model: type[BaseModel], why: str, loose: Any) -> Invalid:
    text = f"{what}: invalid payload ({why}); expected {_shape(model)}"
    out = Invalid(problem=text[:PROBLEM_MAX])
    if isinstance(loose, dict):
        fields = cast("dict[str, Any]", loose)
        who, call = fields.get("principal_id"), fields.get("tool_call_id")
        if isinstance(who, str) and who:
            out.principal_id = who[:200]
        if isinstance(call, str) and call:
            out.tool_call_id = call[:200]
    return out


def _loose(raw: RawValue) -> Any:
    """The payload as plain JSON data, or None when it is not JSON."""
    try:
        return workflow.payload_converter().from_payload(raw.payload)
    except Exception:
        return None


def validation_problems(e: ValidationError, whole: str = "payload") -> str:
    """``"field.path: message; ..."`` for each error of ``e`` (``whole`` names an error of it all)."""
    parts: list[str] = []
    for err in e.errors(include_url=False):
        loc = ".".join(str(x) for x in err["loc"]) or whole
        parts.append(f"{loc}: {err['msg']}")
    return "; ".join(parts)


def _kind(value: Any) -> str:
    return "null" if value is None else f"a {type(value).__name__}, not an object"


def _shape(model: type[BaseModel]) -> str:
    """``{"tool_call_id": ..., "principal_id"?: ...}``: required fields bare, optional ones with ?."""
    fields = [
        f'"{name}"' + ("" if f.is_required() else "?")
        for name, f in model.model_fields.items()
        if name != "carry"
    ]
    return "{" + ", ".join(fields) + "}"
