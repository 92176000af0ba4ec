"""Datasets: JSONL files of cases, and pydantic-evals dataset files (YAML or JSON) imported.

JSONL: one case per line, ``{"id", "input", "expected"?, "expected_tool_calls"?, "metadata"?}``
(docs/contract.md). A line ``{"dataset": {...}}`` (anywhere, usually first) sets the dataset's
``name``, ``approver`` (:class:`~activities.evals.contracts.Approver`) and ``scorers``
(:class:`~activities.evals.contracts.ScorerConfig`). Blank lines and lines starting with ``#``
are skipped.

pydantic-evals (``Dataset.to_file``): ``{"name", "cases": [{"name", "inputs",
"expected_output", "metadata", "evaluators"}], "evaluators"}``. ``inputs`` that is a string is
the input; a mapping with one string value (``question``, ``prompt``...) gives that value; any other
value is sent as JSON. ``expected_output`` that is not a string is compared as JSON text.
Evaluators are read by name: ``EqualsExpected`` -> exact match, ``Contains`` -> contains (its
``value`` becomes the expected text when the case has none); others are kept in
``metadata.evaluators`` and not run. The pydantic-evals package is not needed.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any, cast

import yaml
from pydantic import BaseModel, Field, ValidationError

from activities.evals.contracts import Approver, Case, ScorerConfig


class DatasetError(ValueError):
    """The dataset file is unreadable or invalid; the message names the file and line or case."""


class Dataset(BaseModel):
    """A loaded dataset: its name, cases, approver and scorer settings."""

    name: str
    cases: list[Case]
    approver: Approver = Field(default_factory=Approver)
    scorers: ScorerConfig = Field(default_factory=ScorerConfig)


def load_dataset(path: str | Path) -> Dataset:
    """Read a dataset: ``.jsonl`` as JSONL cases, ``.yaml``/``.yml``/``.json`` as pydantic-evals.

    Raises:
        DatasetError: the file is missing, a line or case is invalid, case ids repeat, or no case.
    """
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as e:
        raise DatasetError(f"{p}: cannot read: {e.strerror or e}") from None
    ds = _from_jsonl(p, text) if p.suffix == ".jsonl" else _from_pydantic_evals(p, text)
    seen: set[str] = set()
    for c in ds.cases:
        if c.id in seen:
            raise DatasetError(f"{p}: case id {c.id!r} appears twice")
        seen.add(c.id)
    if not ds.cases:
        raise DatasetError(f"{p}: no cases")
    return ds


def _from_jsonl(p: Path, text: str) -> Dataset:
    header: dict[str, Any] = {}
    cases: list[Case] = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        try:
            obj = json.loads(line)
            if not isinstance(obj, dict):
                raise DatasetError(f"{p}:{n}: a line must be a JSON object")
            row = cast("dict[str, Any]", obj)
            if "dataset" in row and "input" not in row:
                header = row["dataset"] or {}
                continue
            cases.append(Case.model_validate(row))
        except json.JSONDecodeError as e:
            raise DatasetError(f"{p}:{n}: not JSON: {e.msg}") from None
        except ValidationError as e:
            raise DatasetError(f"{p}:{n}: {_problems(e)}") from None
    try:
        return Dataset(
            name=str(header.get("name") or p.stem),
            cases=cases,
            approver=Approver.model_validate(header.get("approver") or {}),
            scorers=ScorerConfig.model_validate(header.get("scorers") or {}),
        )
    except ValidationError as e:
        raise DatasetError(f"{p}: dataset header: {_problems(e)}") from None


def _problems(e: ValidationError) -> str:
    return "; ".join(
        f"{'.'.join(str(x) for x in err['loc']) or '(case)'}: {err['msg']}"
        for err in e.errors(include_url=False)
    )


def _as_text(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, dict):
        mapping = cast("dict[Any, Any]", value)
        texts: list[str] = [v for v in mapping.values() if isinstance(v, str)]
        if len(mapping) == 1 and texts:
            return texts[0]
    return json.dumps(value, default=str)


def _evaluator(entry: Any) -> tuple[str, Any]:
    """``(name, argument)`` of a serialised evaluator: ``"Name"`` or ``{"Name": arg}``."""
    if isinstance(entry, str):
        return entry, None
    mapping = cast("dict[Any, Any]", entry) if isinstance(entry, dict) else None
    if mapping is not None and len(mapping) == 1:
        ((name, arg),) = mapping.items()
        return str(name), arg
    return repr(cast(object, entry)), None


def _pe_case(raw: dict[str, Any], n: int, shared: list[Any]) -> Case:
    meta = dict(raw.get("metadata") or {}) if isinstance(raw.get("metadata"), dict) else {}
    expected = raw.get("expected_output")
    expected_text = None if expected is None else _as_text(expected)
    names: list[str] = []
    own: Iterable[Any] = raw.get("evaluators") or []
    for ev in [*shared, *own]:
        name, arg = _evaluator(ev)
        names.append(name)
        if name == "EqualsExpected":
            meta["match"] = "exact"
        elif name == "Contains":
            value = cast("dict[str, Any]", arg).get("value") if isinstance(arg, dict) else arg
            meta.setdefault("match", "contains")
            if expected_text is None and value is not None:
                expected_text = _as_text(value)
    if names:
        meta["evaluators"] = names
    return Case(
        id=str(raw.get("name") or f"case-{n}"),
        input=_as_text(raw.get("inputs", "")),
        expected=expected_text,
        metadata=meta,
    )


def _from_pydantic_evals(p: Path, text: str) -> Dataset:
    try:
        doc = json.loads(text) if p.suffix == ".json" else yaml.safe_load(text)
    except (json.JSONDecodeError, yaml.YAMLError) as e:
        raise DatasetError(f"{p}: not {p.suffix.lstrip('.').upper()}: {e}") from None
    data = cast("dict[str, Any]", doc) if isinstance(doc, dict) else None
    if data is None or not isinstance(data.get("cases"), list):
        raise DatasetError(f"{p}: a pydantic-evals dataset is a mapping with a list 'cases'")
    shared: list[Any] = list(data.get("evaluators") or [])
    cases: list[Case] = []
    for n, raw in enumerate(cast("list[Any]", data["cases"]), 1):
        if not isinstance(raw, dict):
            raise DatasetError(f"{p}: case {n} is not a mapping")
        try:
            cases.append(_pe_case(cast("dict[str, Any]", raw), n, shared))
        except ValidationError as e:
            raise DatasetError(f"{p}: case {n}: {_problems(e)}") from None
    return Dataset(name=str(data.get("name") or p.stem), cases=cases)
