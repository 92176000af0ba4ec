"""Reading an agent spec file: :func:`load_spec_file` and :class:`SpecError`.

The parsed YAML is kept per file while the file's modification time (ns) and size stay the same,
so the ``spec.resolve`` of every run does not parse the file again.
"""

from __future__ import annotations

import copy
import functools
from pathlib import Path
from typing import Any, cast


class SpecError(ValueError):
    """The spec file is missing, is not valid YAML, or does not validate; the message names the field."""


def load_spec_file(path: str | Path) -> dict[str, Any]:
    """Read a spec file as a mapping (a fresh copy each call).

    The parsed file is kept while its modification time (ns) and size stay the same: every run
    resolves its spec, and parsing the YAML again each time was the worker's largest cost in
    ``spec.resolve``.

    Raises:
        SpecError: the file is missing, is not YAML, or has no ``agents`` mapping.
    """
    p = Path(path)
    try:
        st = p.stat()
    except FileNotFoundError as e:
        raise SpecError(f"agent spec file not found: {p}") from e
    return copy.deepcopy(_parse_spec_file(str(p), st.st_mtime_ns, st.st_size))


@functools.lru_cache(maxsize=16)
def _parse_spec_file(path: str, mtime_ns: int, size: int) -> dict[str, Any]:
    """The YAML of ``path`` as it was at (``mtime_ns``, ``size``); raises :class:`SpecError`."""
    del mtime_ns, size  # the cache key only
    import yaml  # here: importing the spec's models (workflows/models.py) needs no YAML parser

    try:
        raw = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError as e:
        raise SpecError(f"agent spec file not found: {path}") from e
    except yaml.YAMLError as e:
        raise SpecError(f"agent spec file {path} is not valid YAML: {e}") from e
    doc = cast("dict[str, Any]", raw) if isinstance(raw, dict) else None
    if doc is None or not isinstance(doc.get("agents"), dict):
        raise SpecError(f"agent spec file {path}: top-level `agents` mapping is missing")
    return doc
