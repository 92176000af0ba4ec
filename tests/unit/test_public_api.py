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
