"""Opening beneath the workspace without following symlinks (activities/tools/beneath.py), and the
file tools under a symlink swapped in while they run (activities/tools/builtin.py)."""

from __future__ import annotations

import os
import threading
from pathlib import Path, PurePath

import pytest

from activities.tools import ToolError, beneath, resolve_in_workspace
from tests.support.tool_calls import run


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    d = tmp_path / "outside"
    d.mkdir()
    (d / "f.txt").write_text("SECRET outside the workspace\n")
    return d


@pytest.fixture
def checked(ws: Path) -> PurePath:
    """``d/f.txt``, checked by resolve_in_workspace while ``d`` was a real folder."""
    (ws / "d").mkdir()
    (ws / "d" / "f.txt").write_text("inside\n")
    return resolve_in_workspace(ws, "d/f.txt").relative_to(ws.resolve())


def _swap_for_symlink(ws: Path, outside: Path) -> None:
    (ws / "d" / "f.txt").unlink()
    (ws / "d").rmdir()
    (ws / "d").symlink_to(outside, target_is_directory=True)


def test_reading_a_checked_path_whose_folder_became_a_symlink_is_refused(ws, outside, checked):
    assert beneath.read_limited(ws.resolve(), checked, 100) == b"inside\n"
    _swap_for_symlink(ws, outside)
    with pytest.raises(ToolError, match="symlink"):
        beneath.read_limited(ws.resolve(), checked, 100)


def test_a_file_that_became_a_symlink_is_not_read(ws, outside, checked):
    (ws / "d" / "f.txt").unlink()
    (ws / "d" / "f.txt").symlink_to(outside / "f.txt")
    with pytest.raises(ToolError, match="symlink"):
        beneath.read_limited(ws.resolve(), checked, 100)


def test_writing_through_a_folder_that_became_a_symlink_writes_nothing(ws, outside, checked):
    _swap_for_symlink(ws, outside)
    with pytest.raises(ToolError, match="symlink"):
        beneath.write_replacing(ws.resolve(), checked, b"overwritten")
    assert (outside / "f.txt").read_text() == "SECRET outside the workspace\n"
    assert sorted(p.name for p in outside.iterdir()) == ["f.txt"]  # no temporary file left


def test_missing_folders_are_created_and_a_file_in_the_way_is_named(ws):
    beneath.write_replacing(ws.resolve(), PurePath("a/b/c.txt"), b"x")
    assert (ws / "a" / "b" / "c.txt").read_bytes() == b"x"
    with pytest.raises(ToolError, match="a file is in the way"):
        beneath.write_replacing(ws.resolve(), PurePath("a/b/c.txt/d.txt"), b"x")


def test_a_fifo_is_refused_without_waiting_for_a_writer(ws):
    os.mkfifo(ws / "pipe")
    with pytest.raises(ToolError, match="not a regular file"):
        beneath.read_limited(ws.resolve(), PurePath("pipe"), 100)


def test_a_file_longer_than_the_limit_is_refused_whatever_its_size_said_before(ws):
    (ws / "grows.txt").write_bytes(b"x" * 101)
    with pytest.raises(ToolError, match="too large"):
        beneath.read_limited(ws.resolve(), PurePath("grows.txt"), 100)


def test_listing_shows_a_symlink_as_what_it_points_to(ws, outside):
    (ws / "sub").mkdir()
    (ws / "link").symlink_to(outside, target_is_directory=True)
    (ws / "file").write_text("x")
    assert beneath.list_names(ws.resolve(), PurePath(".")) == [
        ("file", False), ("link", True), ("sub", True),
    ]  # fmt: skip


async def test_read_file_never_returns_a_file_outside_while_a_folder_is_swapped(ctx, ws, outside):
    """A thread keeps swapping ``d`` between a folder and a symlink out while read_file runs."""
    (ws / "d").mkdir()
    (ws / "d" / "f.txt").write_text("inside\n")
    stop = threading.Event()

    def swap() -> None:
        while not stop.is_set():
            os.rename(ws / "d", ws / "real")
            os.symlink(outside, ws / "d")  # d: a symlink out of the workspace
            os.unlink(ws / "d")
            os.rename(ws / "real", ws / "d")  # d: the real folder again

    contents: list[str] = []
    worker = threading.Thread(target=swap)
    worker.start()
    try:
        for _ in range(400):
            out = await run("read_file", {"path": "d/f.txt"}, ctx)
            contents.append(out.content)
    finally:
        stop.set()
        worker.join()
    assert not [c for c in contents if "SECRET" in c]
    assert any("inside" in c for c in contents)  # the race was run, not refused every time


async def test_search_files_takes_re2_patterns_and_answers_a_catastrophic_one(ctx, ws):
    (ws / "a.txt").write_text("a" * 40 + "!\nab ab\n")
    out = await run("search_files", {"query": r"(a)\1", "regex": True}, ctx)
    assert out.status == "error" and "RE2" in out.content  # backreferences are not RE2
    out = await run("search_files", {"query": "^(a+)+$", "regex": True}, ctx)
    assert out.status == "ok" and "No matches" in out.content  # Python's re: hours
    out = await run("search_files", {"query": "b a", "regex": True}, ctx)
    assert out.content == "a.txt:2: ab ab"
