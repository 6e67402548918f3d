"""Record a pydantic-ai agent with session.py, offline: pydantic-ai's own TestModel plays
the model (it calls every tool, then answers with what they returned).

Beside this script: session.py and session_pydantic_ai.py (copied from recorders/). From a
clone of the repository:

    PYTHONPATH=.:recorders python3 examples/recorders/pydantic_ai_example.py chat.jsonl
    python3 -m session summary chat.jsonl

Run it again and the second conversation goes on from the first's checkpoint.
"""

from __future__ import annotations

import asyncio
import sys

from pydantic_ai import Agent
from pydantic_ai.models.test import TestModel
from session_pydantic_ai import recording

agent = Agent(TestModel(), system_prompt="Answer with the weather where asked.")


@agent.tool_plain
def weather(city: str) -> str:
    """Today's weather in *city*."""
    return f"sunny in {city}"


async def main(path: str) -> None:
    async with recording(path, checkpoint=True) as recorder:  # the two lines to add
        result = await agent.run(
            "What is the weather?", message_history=recorder.history(), capabilities=[recorder]
        )
    print(result.output)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1] if len(sys.argv) > 1 else "chat.jsonl"))
