"""Optional parts of the runtime (pyproject.toml ``[project.optional-dependencies]``).

A heavy package that only one feature uses is an extra, imported where that feature runs, so the
runtime installs light and ``agentctl`` starts fast (issue #35). When it is missing, the feature
fails with :class:`MissingExtraError`, whose message names the pip command that installs it.

=============  ======================  =============================================================
extra          packages                what imports them
=============  ======================  =============================================================
``evals``      scipy (143 MB)          the evaluation report's interval and McNemar test
                                       (activities/evals/report.py)
``postgres``   psycopg[binary] (13 MB) the memory store on PostgreSQL (activities/memory/pg_store.py,
                                       ``AGENT_MEMORY_URL=postgresql://...``)
``code-mode``  pydantic-monty (43 MB)  Code Mode: a script over the agent's tools
                                       (activities/code_mode.py, a spec's ``code_mode``)
``otel``       opentelemetry           tracing (workers/telemetry.py, ``AGENT_OTEL``)
``s3``         aioboto3, boto3         payloads and the sandbox's files in S3 (``AGENT_PAYLOAD_STORE=s3``:
                                       workers/payloads/converter.py, activities/s3_files.py)
=============  ======================  =============================================================

Sizes are what each adds to an installed virtual environment (2026-11-27). Memory (numpy,
wordllama, apsw, sqlite-vec: about 155 MB) stays in the runtime: the shipped agents and the demo
use it; it is imported only when a run, a command or the console uses memory.
"""

from __future__ import annotations

import importlib
import importlib.util
from types import ModuleType

PACKAGE = "temporal-agent-runtime"
"""The distribution on PyPI (``workers.config.DIST_NAME``; activities/ cannot import workers/)."""


class MissingExtraError(ImportError):
    """A feature needs an optional package that is not installed; the message says how to add it."""


def install_hint(extra: str) -> str:
    """The pip command that installs ``extra``: ``pip install 'temporal-agent-runtime[extra]'``."""
    return f"pip install '{PACKAGE}[{extra}]'"


def missing_extra(extra: str, feature: str, error: ModuleNotFoundError) -> MissingExtraError:
    """The error to raise from ``except ModuleNotFoundError as error`` around an extra's import."""
    return MissingExtraError(
        f"{feature} needs {error.name or 'a package'}, which is not installed: "
        f"{install_hint(extra)}"
    )


def installed(module: str) -> bool:
    """Whether ``module`` can be imported (without importing it)."""
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def require(module: str, extra: str, feature: str) -> ModuleType:
    """Import ``module``, or raise :class:`MissingExtraError` naming ``extra``.

    Args:
        module: the module to import, e.g. ``"scipy.stats"``.
        extra: the optional-dependency group that installs it, e.g. ``"evals"``.
        feature: what needs it, for the message, e.g. ``"the evaluation report"``.

    Raises:
        MissingExtraError: ``module`` (or a package it needs) is not installed.
    """
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as e:
        raise missing_extra(extra, feature, e) from e
