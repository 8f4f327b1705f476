"""Seed 003's incident responder as a LangGraph agent whose tools come from
the ledger over MCP (STDIO, through `langchain-mcp-adapters`): it reads the
triage summary, then the suspected cause, by name, and closes its run.
Every read and the close are the ledger's decisions, recorded in the run's
trail by the agent whose token the MCP server shows.

A scripted chat model stands in for the LLM (no network, no weights): it
asks for the tools a model would, in seed 003's order. Put a real chat
model in `create_agent(model, …)` and the rest stays as it is.

    python examples/langgraph_triage.py agentledger mcp --run <run> \\
        --server http://127.0.0.1:8700 --token-file responder.token

The arguments are the command that starts the MCP server (here
`agentledger mcp`, relaying to a server with the agent's token; on a data
dir no server owns, `agentledger --data DIR mcp --run <run>` serves it
directly). Needs `langgraph`, `langchain` and `langchain-mcp-adapters`
(tools/python/langgraph/requirements.txt: they need `mcp` below 2). Prints
one JSON object: what each tool call returned and the agent's final
answer. tests/mcp.rs runs it as written.
"""

import asyncio
import json
import sys

from langchain_core.language_models.fake_chat_models import FakeMessagesListChatModel
from langchain_core.messages import AIMessage, ToolMessage
from langchain_mcp_adapters.client import MultiServerMCPClient
from langchain_mcp_adapters.tools import load_mcp_tools
from langchain.agents import create_agent


def call(step, name, args):
    return AIMessage(content="", tool_calls=[{"name": name, "args": args, "id": f"call-{step}"}])


# Seed 003: the listener reads by the names the event's contract gives,
# then finishes.
SCRIPT = [
    call(0, "read_artifact", {"name": "triage_summary"}),
    call(1, "read_artifact", {"name": "suspected_cause"}),
    call(2, "close_run", {"status": "succeeded", "summary": "Restarted the failing pod after reading the triage"}),
    AIMessage(content="Incident handled."),
]


class ScriptedChatModel(FakeMessagesListChatModel):
    """The scripted replies; the tools are the ledger's, so binding them
    changes nothing."""

    def bind_tools(self, tools, **kwargs):
        return self


async def main(command, args):
    client = MultiServerMCPClient(
        {"agentledger": {"transport": "stdio", "command": command, "args": args}}
    )
    # One session for the whole run: one MCP server process, one trail.
    async with client.session("agentledger") as session:
        tools = await load_mcp_tools(session)
        # A LangGraph graph: the model, then each tool call it asks for.
        agent = create_agent(
            ScriptedChatModel(responses=SCRIPT),
            tools,
            system_prompt="Read the triage by name, then close the run with what you did.",
        )
        state = await agent.ainvoke(
            {"messages": [("user", "An incident was triaged: respond to it.")]}
        )
    messages = state["messages"]
    calls = [
        {"tool": m.name, "output": m.content, "error": m.status == "error"}
        for m in messages
        if isinstance(m, ToolMessage)
    ]
    print(json.dumps({"tools": [t.name for t in tools], "calls": calls, "final": messages[-1].content}))


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2:]))
