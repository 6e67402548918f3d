"""Record a Google ADK agent with session.py, offline: a scripted model (ADK ships no test
model in its public API; a ``BaseLlm`` subclass is ADK's way to bring a model) asks for the
weather, then answers.

Beside this script: session.py and session_google_adk.py (copied from recorders/). From a
clone of the repository:

    PYTHONPATH=.:recorders python3 examples/recorders/google_adk_example.py chat.jsonl
    python3 -m session summary chat.jsonl

Run it again and the second conversation goes on from the first's checkpoint.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncGenerator

from google.adk.agents import LlmAgent
from google.adk.apps import App
from google.adk.models.base_llm import BaseLlm
from google.adk.models.llm_request import LlmRequest
from google.adk.models.llm_response import LlmResponse
from google.adk.runners import Runner
from google.adk.sessions import InMemorySessionService
from google.genai import types
from session_google_adk import recording

USAGE = types.GenerateContentResponseUsageMetadata(
    prompt_token_count=20, candidates_token_count=5, total_token_count=25
)


class ScriptedModel(BaseLlm):
    """Asks for the weather in Paris, then answers with what the tool said."""

    model: str = "scripted"

    async def generate_content_async(
        self, llm_request: LlmRequest, stream: bool = False
    ) -> AsyncGenerator[LlmResponse, None]:
        last = llm_request.contents[-1].parts or []
        said = [part.function_response.response for part in last if part.function_response]
        if said:
            part = types.Part(text=f"It is {(said[0] or {}).get('result')}.")
        else:
            call = types.FunctionCall(id="call-1", name="weather", args={"city": "Paris"})
            part = types.Part(function_call=call)
        yield LlmResponse(content=types.Content(role="model", parts=[part]), usage_metadata=USAGE)


def weather(city: str) -> str:
    """Today's weather in *city*."""
    return f"sunny in {city}"


agent = LlmAgent(
    name="forecaster", instruction="Answer with the weather.", model=ScriptedModel(), tools=[weather]
)


async def main(path: str) -> None:
    service = InMemorySessionService()
    async with recording(path, checkpoint=True) as recorder:  # the two lines to add
        runner = Runner(app=App(name="app", root_agent=agent, plugins=[recorder]), session_service=service)
        chat = await service.create_session(app_name="app", user_id="u")
        for event in recorder.history():  # the conversation so far; none for a new file
            await service.append_event(chat, event)
        message = types.Content(role="user", parts=[types.Part(text="What is the weather in Paris?")])
        async for event in runner.run_async(user_id="u", session_id=chat.id, new_message=message):
            if event.is_final_response() and event.content and event.content.parts:
                print(event.content.parts[0].text)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1] if len(sys.argv) > 1 else "chat.jsonl"))
