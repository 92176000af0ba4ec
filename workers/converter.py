"""Moved to :mod:`workers.payloads.converter`; this path stays for code written against it.

docs/python-client.md showed ``from workers.converter import build_data_converter`` before the
package was reorganised (docs/changelog.md). New code: ``from workers import
build_data_converter`` or :mod:`workers.payloads.converter`.
"""

from __future__ import annotations

from workers.payloads.converter import (
    PayloadStoreConfigError,
    build_data_converter,
    build_external_storage,
    is_reference,
    reference_of,
    resolve_references,
    store_large_payloads,
)

__all__ = [
    "PayloadStoreConfigError",
    "build_data_converter",
    "build_external_storage",
    "is_reference",
    "reference_of",
    "resolve_references",
    "store_large_payloads",
]
