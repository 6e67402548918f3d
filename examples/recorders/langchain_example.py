"""Record a LangGraph agent with session.py, offline: LangChain's own GenericFakeChatModel
plays the model (it asks for the weather, then answers).

Beside this script: session.py and session_langchain.py (copied from recorders/). From a
clone of the repository:

    PYTHONPATH=.:recorders python3 examples/recorders/langchain_example.py chat.jsonl
    python3 -m session summary chat.jsonl

Run it again and the second conversation goes on from the first's checkpoint.
"""

from __future__ import annotations

import asyncio
import sys
from typing import Any

from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.tools import tool
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.graph.state import CompiledStateGraph
from langgraph.prebuilt import ToolNode, tools_condition
from session_langchain import recording

USAGE = {"input_tokens": 20, "output_tokens": 5, "total_tokens": 25}
ask = {"name": "weather", "args": {"city": "Paris"}, "id": "call-1", "type": "tool_call"}
model = GenericFakeChatModel(
    messages=iter(
        [
            AIMessage("", tool_calls=[ask], usage_metadata=USAGE),
            AIMessage("It is sunny in Paris.", usage_metadata=USAGE),
        ]
    )
)


@tool
def weather(city: str) -> str:
    """Today's weather in *city*."""
    return f"sunny in {city}"


async def call_model(state: MessagesState) -> dict[str, list[AIMessage]]:
    return {"messages": [await model.ainvoke(state["messages"])]}


graph = StateGraph(MessagesState)
graph.add_node("model", call_model)
graph.add_node("tools", ToolNode([weather]))
graph.add_edge(START, "model")
graph.add_conditional_edges("model", tools_condition)
graph.add_edge("tools", "model")
agent: CompiledStateGraph[Any] = graph.compile()


async def main(path: str) -> None:
    async with recording(path, checkpoint=True) as recorder:  # the two lines to add
        prompt = HumanMessage("What is the weather in Paris?")
        state = await agent.ainvoke({"messages": [*recorder.history(), prompt]}, {"callbacks": [recorder]})
    print(state["messages"][-1].content)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1] if len(sys.argv) > 1 else "chat.jsonl"))
