"""Payloads of a history: decoded into Python values, and made plain JSON where they are not.

Values are decoded with the payload converter of the data converter given, by default
``pydantic_data_converter``: the worker's converter
(:func:`workers.payloads.converter.build_data_converter`) is that one plus external storage, so once
:func:`inline_payloads` has resolved references and codecs with the client's converter, every
payload reads exactly as the worker wrote it.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message
from temporalio.api.common.v1 import Payloads
from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import WorkflowHistory
from temporalio.converter import DataConverter

from workers.history._fetch import Histories, as_chain
from workers.payloads.converter import is_reference
from workflows.inbound import signal_safe_data_converter as pydantic_data_converter

DEFAULT_CONVERTER = pydantic_data_converter
"""The payload converter of the worker's data converter (JSON through pydantic)."""


def decode_values(converter: DataConverter, payloads: Any) -> list[Any]:
    """Decode a ``Payloads`` message into plain Python values (dicts for JSON objects).

    A payload that cannot be decoded gives ``["<undecodable payload: ...>"]``: an unreadable
    payload must not stop an audit.
    """
    items = list(payloads.payloads) if payloads is not None else []
    if not items:
        return []
    try:
        return list(converter.payload_converter.from_payloads(items, None))
    except Exception as e:  # noqa: BLE001 - an unreadable payload must not stop the audit
        return [f"<undecodable payload: {e}>"]


def first_value(converter: DataConverter, payloads: Any) -> Any:
    """The first decoded value of a ``Payloads`` message, or None when it holds none."""
    values = decode_values(converter, payloads)
    return values[0] if values else None


def as_dict(value: Any) -> dict[str, Any]:
    """``value`` when it is a dict (a decoded JSON object), else an empty dict."""
    return value if isinstance(value, dict) else {}


def first_object(converter: DataConverter, payloads: Any) -> dict[str, Any]:
    """The first decoded value as a dict (``{}`` when it is missing or not a JSON object)."""
    return as_dict(first_value(converter, payloads))


def _repeated(fd: FieldDescriptor) -> bool:
    flag = getattr(fd, "is_repeated", None)  # protobuf >= 5.28; ``label`` is gone in 7
    if flag is not None:
        return bool(flag)
    return fd.label == FieldDescriptor.LABEL_REPEATED  # pyright: ignore[reportAttributeAccessIssue] - protobuf stubs lack the label constants


def payloads_in(msg: Message) -> Iterator[Payloads]:
    """Every ``Payloads`` message inside ``msg``, recursively.

    Map fields count only where their values are ``Payloads`` (a marker's ``details``: the result
    of a local activity); maps of single ``Payload`` (search attributes, memo, headers) are
    skipped.
    """
    for fd, value in msg.ListFields():
        mt = fd.message_type
        if mt is None:
            continue
        if mt.GetOptions().map_entry:
            vt = mt.fields_by_name["value"].message_type
            if vt is not None and vt.full_name == Payloads.DESCRIPTOR.full_name:
                yield from value.values()
            continue
        items = list(value) if _repeated(fd) else [value]
        for item in items:
            if mt.full_name == Payloads.DESCRIPTOR.full_name:
                yield item
            else:
                yield from payloads_in(item)


async def _inline_event(event: HistoryEvent, converter: DataConverter) -> HistoryEvent:
    """A copy of ``event`` whose payloads are plain JSON (those that cannot be read are kept)."""
    codec = converter.payload_codec is not None
    plain = DEFAULT_CONVERTER.payload_converter
    copy_ev = HistoryEvent()
    copy_ev.CopyFrom(event)
    for p in payloads_in(copy_ev):
        if not codec and not any(is_reference(x) for x in p.payloads):
            continue
        try:
            new = plain.to_payloads(await converter.decode(list(p.payloads)))
        except Exception:  # noqa: BLE001 - keep the payload as recorded
            continue
        del p.payloads[:]
        p.payloads.extend(new)
    return copy_ev


async def inline_payloads(
    histories: Histories, data_converter: DataConverter
) -> list[WorkflowHistory]:
    """Copies of the histories whose payloads are plain JSON, ready for :func:`audit`.

    External-storage references are resolved and a payload codec is applied with
    ``data_converter`` (the client's: ``client.data_converter``); each payload is decoded and
    re-encoded as plain JSON. Returns the histories unchanged when the converter has neither
    external storage nor a codec. A payload that cannot be resolved (e.g. its stored file was
    removed) is left as it is, and the audit shows it as undecodable.
    """
    chain = as_chain(histories)
    if data_converter.external_storage is None and data_converter.payload_codec is None:
        return chain
    out: list[WorkflowHistory] = []
    for h in chain:
        events = [await _inline_event(ev, data_converter) for ev in h.events]
        out.append(WorkflowHistory(h.workflow_id, events))
    return out
