"""The real ``openai`` client pointed at a scripted model server, and a tool to offer it."""

from __future__ import annotations

import openai

from workers.testing.scripted_model import ScriptedModel

TOOLS = [
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
