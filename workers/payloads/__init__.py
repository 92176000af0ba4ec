"""Payloads on their way to and from Temporal: the data converter, encryption, the codec server.

:mod:`workers.payloads.converter` builds the data converter every client and worker uses
(pydantic JSON, large payloads kept outside the history), :mod:`workers.payloads.encryption` the
AES-GCM codec, :mod:`workers.payloads.codec_server` the HTTP codec the Web UI calls. The payload
store's local driver stays in :mod:`activities.storage`: activities use it, and ``activities``
does not import ``workers``.
"""
