"""The library at the top of `workers` names what it promises, and importing it stays light."""

import subprocess
import sys

import pytest

import workers
from workers import client


def test_every_public_name_resolves_to_its_module():
    for name in workers.__all__:
        assert getattr(workers, name) is not None, name
    assert workers.connect is client.connect
    assert workers.start_run is client.start_run
    assert workers.RunRequest(input="hi").agent == "default"
    with pytest.raises(AttributeError):
        workers.not_a_name  # noqa: B018


def test_importing_a_submodule_does_not_import_the_client():
    code = "import sys, workers.config; print('workers.client' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_all_lists_exactly_the_lazy_names():
    assert sorted(workers.__all__) == sorted(workers._WHERE)


def test_moved_public_paths_still_import():
    """The paths users were shown keep working after the reorganisation (docs/changelog.md)."""
    code = (
        "import sys, workers.cli, workers.converter, workers.payloads.converter as c; "
        "assert workers.converter.build_data_converter is c.build_data_converter; "
        "assert callable(workers.cli.main); "
        "print('workers.cli.commands' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"  # the agentctl entry point loads its commands when run


def test_files_beside_the_modules_are_found():
    from workers.console import serve
    from workers.local.model import server

    assert (serve.STATIC / "console.html").is_file()
    assert server.TEMPLATE_PATH.is_file()
