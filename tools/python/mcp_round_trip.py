"""One agent's round trip with a run's MCP endpoint, through the official MCP
Python SDK (`mcp`, tools/python/requirements.txt): initialize, list the
tools, then make each call of a plan given on stdin, printing one JSON
object of what the SDK saw.

    AGENTLEDGER_TOKEN=… python mcp_round_trip.py URL < plan.json

The plan is a JSON array of [tool, arguments] pairs. The bearer token is
taken from AGENTLEDGER_TOKEN, never from the command line. Used by
tests/mcp.rs.
"""

import asyncio
import json
import os
import sys

from mcp import ClientSession
from mcp.client.streamable_http import create_mcp_http_client, streamable_http_client


def plain(model):
    return model.model_dump(mode="json", by_alias=True, exclude_none=True)


async def round_trip(url, token, plan):
    headers = {"Authorization": f"Bearer {token}"}
    async with create_mcp_http_client(headers=headers) as http:
        async with streamable_http_client(url, http_client=http) as (read, write):
            async with ClientSession(read, write) as session:
                init = await session.initialize()
                listed = await session.list_tools()
                calls = []
                for name, arguments in plan:
                    result = await session.call_tool(name, arguments)
                    calls.append(plain(result))
                return {
                    "protocol": init.protocol_version,
                    "server": plain(init.server_info),
                    "tools": [plain(t) for t in listed.tools],
                    "calls": calls,
                }


def main():
    url = sys.argv[1]
    token = os.environ["AGENTLEDGER_TOKEN"]
    plan = json.load(sys.stdin)
    print(json.dumps(asyncio.run(round_trip(url, token, plan))))


if __name__ == "__main__":
    main()
