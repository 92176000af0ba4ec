"""The real ``openai`` client pointed at a scripted model server, and a tool to offer it."""

from __future__ import annotations

from typing import cast

import openai
from openai.types.chat import (
    ChatCompletionAssistantMessageParam,
    ChatCompletionMessage,
    ChatCompletionMessageFunctionToolCall,
    ChatCompletionToolParam,
)

from workers.testing.scripted_model import ScriptedModel

TOOLS: list[ChatCompletionToolParam] = [
    {
        "type": "function",
        "function": {
            "name": "list_files",
            "description": "List files",
            "parameters": {"type": "object", "properties": {"path": {"type": "string"}}},
        },
    }
]


def client_for(model: ScriptedModel) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=model.base_url, api_key="test", max_retries=0)


async def ask(client: openai.AsyncOpenAI, content: str = "hi", **kwargs):
    return await client.chat.completions.create(
        model="any", messages=[{"role": "user", "content": content}], **kwargs
    )


def function_call(
    message: ChatCompletionMessage, index: int = 0
) -> ChatCompletionMessageFunctionToolCall:
    """Tool call ``index`` of ``message``, which must be there and be a function call."""
    assert message.tool_calls is not None
    call = message.tool_calls[index]
    assert isinstance(call, ChatCompletionMessageFunctionToolCall)
    return call


def assistant_param(message: ChatCompletionMessage) -> ChatCompletionAssistantMessageParam:
    """``message`` sent back in the next request: its JSON, which is an assistant message."""
    return cast(ChatCompletionAssistantMessageParam, message.model_dump(exclude_none=True))
