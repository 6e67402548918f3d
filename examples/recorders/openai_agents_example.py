"""Record an OpenAI Agents SDK run with session.py, offline: the SDK's own ScriptedModel
plays the model (it asks for the weather, then answers).

Beside this script: session.py and session_openai_agents.py (copied from recorders/). From a
clone of the repository:

    PYTHONPATH=.:recorders python3 examples/recorders/openai_agents_example.py chat.jsonl
    python3 -m session summary chat.jsonl

Run it again and the second conversation goes on from the first's checkpoint.
"""

from __future__ import annotations

import asyncio
import sys

from agents import Agent, Usage, function_tool, set_tracing_disabled
from agents.testing import ScriptedModel, assistant_message, function_call
from session_openai_agents import recording

set_tracing_disabled(True)  # offline: nothing to send traces to


@function_tool
def weather(city: str) -> str:
    """Today's weather in *city*."""
    return f"sunny in {city}"


model = ScriptedModel(
    [
        [function_call("weather", {"city": "Paris"}, call_id="call-1")],
        [assistant_message("It is sunny in Paris.")],
    ],
    default_usage=Usage(requests=1, input_tokens=20, output_tokens=5, total_tokens=25),
)
agent = Agent(name="forecaster", instructions="Answer with the weather.", model=model, tools=[weather])


async def main(path: str) -> None:
    async with recording(path, checkpoint=True) as recorder:  # the two lines to add
        result = await recorder.run(  # in place of Runner.run
            agent, [*recorder.history(), {"role": "user", "content": "What is the weather in Paris?"}]
        )
    print(result.final_output)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1] if len(sys.argv) > 1 else "chat.jsonl"))
