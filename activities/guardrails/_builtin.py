"""The built-in guardrails: the run's secrets, personal data, prompt-injection markers, length.

Each is a function ``(text, entry, secrets) -> Finding | None``. Personal data is found with
maintained libraries where one is light: ``phonenumbers`` (Google's libphonenumber, in its
``phonenumberslite`` form) finds phone numbers, ``python-stdnum`` checks card numbers (Luhn) and
IBANs (ISO 13616 check digits); e-mail addresses are one regular expression. No light library
detects prompt injection (the maintained ones, LLM Guard or NeMo Guardrails, run transformer
models), so ``injection`` is a list of markers: the phrases injected instructions use.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence

from activities.guardrail_models import DEFAULT_MAX_CHARS, PII_KINDS, GuardrailEntry
from activities.guardrails._registry import Finding
from activities.redaction import secret_values

__all__ = ["BUILTINS", "INJECTION_MARKERS", "find_pii", "injection", "length", "pii", "secrets"]

Check = Callable[[str, GuardrailEntry, list[str]], "Finding | None"]


def _plural(n: int, one: str, many: str) -> str:
    return f"{n} {one if n == 1 else many}"


def secrets(text: str, entry: GuardrailEntry, names: list[str]) -> Finding | None:
    """The values of the run's secrets, also JSON-escaped.

    The secrets are those of activities/redaction.py: the spec's ``secrets``,
    ``OPENAI_API_KEY``, ``TEMPORAL_API_KEY``, the worker's keys. The detail names the variables, never a value.
    """
    spans: list[tuple[int, int]] = []
    labels: list[str] = []
    for label, value in secret_values(names):
        forms = {value, json.dumps(value)[1:-1]}
        hit = False
        for form in forms:
            start = text.find(form)
            while start >= 0:
                spans.append((start, start + len(form)))
                hit = True
                start = text.find(form, start + len(form))
        if hit and label not in labels:
            labels.append(label)
    if not spans:
        return None
    what = ", ".join(labels)
    return Finding(f"{_plural(len(spans), 'secret value', 'secret values')} ({what})", spans)


_EMAIL = re.compile(r"[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,24}")
_CARD = re.compile(r"(?<![\d.-])\d(?:[ -]?\d){12,18}(?![\d])")
_IBAN = re.compile(r"\b[A-Z]{2}\d{2}(?: ?[A-Z0-9]){11,30}\b")


def find_pii(
    text: str, kinds: Sequence[str] = PII_KINDS, region: str | None = None
) -> dict[str, list[tuple[int, int]]]:
    """Spans of personal data in ``text`` by kind (``email``, ``phone``, ``card``, ``iban``).

    A card number is 13-19 digits (spaces or dashes between) that pass the Luhn check; an IBAN
    passes its check digits; a phone number is one ``phonenumbers`` finds valid, written with a
    ``+`` country code unless ``region`` says where numbers without one are from. Digits already
    taken as a card number or an IBAN are not taken again as a phone number.
    """
    from stdnum import iban as stdnum_iban
    from stdnum import luhn

    found: dict[str, list[tuple[int, int]]] = {}
    taken: list[tuple[int, int]] = []
    if "email" in kinds:
        found["email"] = [m.span() for m in _EMAIL.finditer(text)]
    if "card" in kinds:
        cards: list[tuple[int, int]] = []
        for m in _CARD.finditer(text):
            digits = re.sub(r"\D", "", m.group())
            if 13 <= len(digits) <= 19 and luhn.is_valid(digits):
                cards.append(m.span())
        found["card"] = cards
        taken += cards
    if "iban" in kinds:
        ibans = [m.span() for m in _IBAN.finditer(text) if stdnum_iban.is_valid(m.group())]
        found["iban"] = ibans
        taken += ibans
    if "phone" in kinds:
        import phonenumbers

        phones: list[tuple[int, int]] = []
        for m in phonenumbers.PhoneNumberMatcher(text, region.upper() if region else None):
            span = (m.start, m.end)
            if not any(a < span[1] and span[0] < b for a, b in taken):
                phones.append(span)
        found["phone"] = phones
    return {k: v for k, v in found.items() if v}


_PII_NAMES = {
    "email": ("e-mail address", "e-mail addresses"),
    "phone": ("phone number", "phone numbers"),
    "card": ("card number", "card numbers"),
    "iban": ("IBAN", "IBANs"),
}


def pii(text: str, entry: GuardrailEntry, names: list[str]) -> Finding | None:
    """Personal data (:func:`find_pii`, the entry's ``kinds`` and ``region``); counted by kind."""
    found = find_pii(text, entry.kinds or PII_KINDS, entry.region)
    if not found:
        return None
    detail = ", ".join(_plural(len(v), *_PII_NAMES[k]) for k, v in found.items())
    return Finding(detail, sorted(s for v in found.values() for s in v))


INJECTION_MARKERS: dict[str, re.Pattern[str]] = {
    name: re.compile(pattern, re.IGNORECASE)
    for name, pattern in {
        "ignore previous instructions": r"\b(?:ignore|disregard|forget|override|skip)\b"
        r"(?:\s+(?:all|any|every|the|your|my|of|these|those))*\s+"
        r"(?:previous|prior|above|earlier|preceding|original|system|existing)?\s*"
        r"(?:instructions?|prompts?|rules|directives|guidelines|context)\b",
        "new instructions": r"\b(?:new|updated|real|actual|secret|hidden)\s+"
        r"(?:system\s+)?instructions?\s*:",
        "role change": r"\byou\s+are\s+(?:now|no\s+longer)\b|\bact\s+as\s+(?:an?\s+)?"
        r"(?:unrestricted|jailbroken|dan\b)|\bdeveloper\s+mode\b|\bjailbreak",
        "chat template token": r"<\|(?:im_start|im_end|system|user|assistant|endoftext)\|>"
        r"|\[/?INST\]|<</?SYS>>",
        "fake system header": r"(?m)^\s*(?:#+\s*)?(?:system|assistant)\s*(?:prompt|message)?\s*:",
        "reveal instructions": r"\b(?:reveal|print|show|repeat|output|leak)\s+(?:me\s+)?"
        r"(?:your|the)\s+(?:system\s+prompt|instructions|hidden\s+prompt|secrets?|api\s+keys?)",
        "approval claim": r"\b(?:approve|allow|authori[sz]e)\s+(?:this|the|all|every)\s+"
        r"(?:\w+\s+)?(?:calls?|requests?|actions?|tools?)\s+(?:automatically|without)\b"
        r"|\bi\s+am\s+(?:the|your)\s+(?:judge|approver|administrator|admin|operator|developer)\b",
        "exfiltration": r"\b(?:send|post|upload|forward|email|exfiltrate)\s+(?:\w+\s+){0,4}"
        r"(?:secrets?|credentials|api\s+keys?|passwords?|tokens?)\s+to\b",
    }.items()
}
"""Markers of instructions injected into text the model reads: name -> pattern (any case)."""


def injection(text: str, entry: GuardrailEntry, names: list[str]) -> Finding | None:
    """Prompt-injection markers (:data:`INJECTION_MARKERS`); the detail names the markers."""
    hits: dict[str, list[tuple[int, int]]] = {}
    for name, pattern in INJECTION_MARKERS.items():
        spans = [m.span() for m in pattern.finditer(text)]
        if spans:
            hits[name] = spans
    if not hits:
        return None
    return Finding("markers: " + ", ".join(hits), sorted(s for v in hits.values() for s in v))


def length(text: str, entry: GuardrailEntry, names: list[str]) -> Finding | None:
    """More than ``max_chars`` characters (default 20,000); ``redact`` cuts the rest."""
    limit = entry.max_chars or DEFAULT_MAX_CHARS
    if len(text) <= limit:
        return None
    return Finding(f"{len(text)} characters, over the {limit} allowed", [(limit, len(text))])


BUILTINS: dict[str, Check] = {
    "secrets": secrets,
    "pii": pii,
    "injection": injection,
    "length": length,
}
"""The built-in guardrails by name (the names of :data:`activities.guardrail_models.BUILTIN_GUARDRAILS`)."""
