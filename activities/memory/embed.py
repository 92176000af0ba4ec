"""Embedders: text -> unit vectors, offline by default.

:class:`WordLlamaEmbedder` loads the 256-d static embeddings that ship inside the ``wordllama``
wheel (MIT code; weights trained from Llama-2/phi-3 token embeddings, per its README), after
checking both files against pinned sha256 sums; about 0.1 ms a chunk on this 2-core machine. It
loads the files directly because ``WordLlama.load()`` looks for its tokenizer under a folder the
wheel does not have and then tries a model hub (measured here, 2026-11). :class:`OpenAIEmbedder`
takes any OpenAI-compatible ``/v1/embeddings`` endpoint.
"""

from __future__ import annotations

import hashlib
import threading
from contextlib import AbstractContextManager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, cast

if TYPE_CHECKING:  # numpy is loaded on the first embedding, not on import (light CLI imports)
    import numpy as np


class Embedder(Protocol):
    """``embed(texts) -> float32 array (len(texts), dim)``, rows L2-normalised."""

    dim: int

    def embed(self, texts: list[str]) -> np.ndarray:
        """Embed ``texts``."""
        ...


class EmbedderIntegrityError(RuntimeError):
    """A shipped model file does not have the sha256 it must have: it is not used."""


WORDLLAMA_SHA256 = {
    "weights/l2_supercat_256.safetensors": (
        "64b47a2dc493cb8e85944076601189739852d7b64e0e1eedcb1937a251cd9fd5"
    ),
    "tokenizers/l2_supercat_tokenizer_config.json": (
        "93248f2a9ec36c7b35f700a033d5f36228aae48db61aee31007fa49062cdeb68"
    ),
}
"""sha256 of the files of ``wordllama==0.4.0.post1`` this embedder loads (measured from the wheel)."""


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


class WordLlamaEmbedder:
    """256-d wordllama embeddings from the installed wheel, checked by sha256 before use.

    Raises (on first use):
        ImportError: wordllama is not installed (``pip install wordllama``).
        EmbedderIntegrityError: a file's sha256 differs from :data:`WORDLLAMA_SHA256`.
    """

    dim = 256

    def __init__(self) -> None:
        self._model: object | None = None
        self._lock = threading.Lock()

    def _load(self) -> object:
        import wordllama  # pyright: ignore[reportMissingTypeStubs] - wordllama ships no type stubs
        from safetensors import safe_open
        from tokenizers import Tokenizer
        from wordllama.inference import WordLlamaInference  # pyright: ignore[reportMissingTypeStubs] - wordllama ships no type stubs

        root = Path(wordllama.__file__).parent
        for rel, want in WORDLLAMA_SHA256.items():
            got = _sha256(root / rel)
            if got != want:
                raise EmbedderIntegrityError(f"{root / rel}: sha256 {got}, expected {want}")
        weights = safe_open(str(root / "weights/l2_supercat_256.safetensors"), framework="np")
        # safetensors leaves safe_open.__enter__ unannotated: its tensors are numpy arrays here
        with cast("AbstractContextManager[Any]", weights) as f:
            matrix = f.get_tensor("embedding.weight")
        tok = Tokenizer.from_file(str(root / "tokenizers/l2_supercat_tokenizer_config.json"))
        return WordLlamaInference(matrix, tok)

    def embed(self, texts: list[str]) -> np.ndarray:
        """Embed ``texts`` (L2-normalised float32 rows)."""
        with self._lock:
            if self._model is None:
                self._model = self._load()
        import numpy as np

        out = self._model.embed(texts, norm=True)  # pyright: ignore[reportAttributeAccessIssue, reportUnknownMemberType, reportUnknownVariableType] - wordllama API
        return np.asarray(out, dtype=np.float32).reshape(len(texts), self.dim)


class OpenAIEmbedder:
    """Any OpenAI-compatible ``/v1/embeddings`` endpoint (``model`` and ``dim`` must match it)."""

    def __init__(self, base_url: str, api_key: str, model: str, dim: int) -> None:
        import openai

        self._client = openai.OpenAI(base_url=base_url, api_key=api_key, max_retries=2)
        self._model = model
        self.dim = dim

    def embed(self, texts: list[str]) -> np.ndarray:
        """Embed ``texts``; raises ``openai.APIError`` when the endpoint fails."""
        import numpy as np

        resp = self._client.embeddings.create(model=self._model, input=texts)
        m = np.asarray([d.embedding for d in resp.data], dtype=np.float32)
        norms = np.linalg.norm(m, axis=1, keepdims=True)
        return m / np.where(norms == 0, 1, norms)
