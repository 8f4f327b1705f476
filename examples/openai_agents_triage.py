"""Seed 003's incident responder as an OpenAI Agents SDK agent that reaches
the ledger over MCP (Streamable HTTP): it reads the triage summary, then the
suspected cause, by name, and closes its run. Every read and the close are
the ledger's decisions, recorded in the run's trail by the agent.

A scripted model stands in for the LLM (no network, no weights): it asks
for the tools a model would, in seed 003's order, and writes its summary
from what the reads returned. Put a real model in `Agent(model=…)` and the
rest stays as it is. Tracing to OpenAI is off.

    AGENTLEDGER_TOKEN=<the agent's token> python examples/openai_agents_triage.py \\
        http://127.0.0.1:8700/v1/runs/<run>/mcp

Needs `openai-agents` (tools/python/requirements.txt). Prints one JSON object:
what each tool call returned and the agent's final answer. tests/mcp.rs runs
it as written.
"""

import asyncio
import json
import os
import sys

from agents import Agent, Runner, set_tracing_disabled
from agents.items import ModelResponse
from agents.mcp import MCPServerStreamableHttp
from agents.models.interface import Model
from agents.usage import Usage
from openai.types.responses import (
    ResponseFunctionToolCall,
    ResponseOutputMessage,
    ResponseOutputText,
)

# Seed 003: the listener reads by the names the event's contract gives.
PLAN = ["triage_summary", "suspected_cause"]


def outputs_so_far(items):
    """The tool outputs the run has seen, in order."""
    if isinstance(items, str):
        return []
    return [i.get("output") for i in items if isinstance(i, dict) and i.get("type") == "function_call_output"]


class ScriptedModel(Model):
    """A model that asks for seed 003's reads, then closes the run."""

    async def get_response(self, system_instructions, input, model_settings, tools, output_schema,
                           handoffs, tracing, **kwargs):
        seen = outputs_so_far(input)
        step = len(seen)
        if step < len(PLAN):
            call = ("read_artifact", {"name": PLAN[step]})
        elif step == len(PLAN):
            summary = "Restarted the failing pod; cause: " + text_of(seen[1])
            call = ("close_run", {"status": "succeeded", "summary": summary})
        else:
            message = ResponseOutputMessage(
                id="msg-final", type="message", role="assistant", status="completed",
                content=[ResponseOutputText(type="output_text", text="Incident handled.", annotations=[])],
            )
            return ModelResponse(output=[message], usage=Usage(), response_id=None)
        name, arguments = call
        tool_call = ResponseFunctionToolCall(
            type="function_call", id=f"fc-{step}", call_id=f"call-{step}", name=name,
            arguments=json.dumps(arguments), status="completed",
        )
        return ModelResponse(output=[tool_call], usage=Usage(), response_id=None)

    def stream_response(self, *args, **kwargs):
        raise NotImplementedError("the scripted model does not stream")


def text_of(output):
    """The text a tool output carries: the SDK gives the model a list of
    content parts (or their JSON)."""
    if isinstance(output, str):
        try:
            output = json.loads(output)
        except ValueError:
            return output
    if isinstance(output, dict):
        output = [output]
    if isinstance(output, list):
        return " ".join(p.get("text", "") for p in output if isinstance(p, dict))
    return str(output)


async def main(url, token):
    set_tracing_disabled(True)
    ledger = MCPServerStreamableHttp(
        params={"url": url, "headers": {"Authorization": f"Bearer {token}"}},
        name="agentledger",
        cache_tools_list=True,
    )
    async with ledger:
        agent = Agent(
            name="responder",
            instructions="Read the triage by name, then close the run with what you did.",
            model=ScriptedModel(),
            mcp_servers=[ledger],
        )
        result = await Runner.run(agent, "An incident was triaged: respond to it.")
    calls = [
        {"output": item.output}
        for item in result.new_items
        if item.type == "tool_call_output_item"
    ]
    print(json.dumps({"calls": calls, "final": result.final_output}))


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], os.environ["AGENTLEDGER_TOKEN"]))
