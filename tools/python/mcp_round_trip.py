"""One agent's round trip with a run's MCP server, through the official MCP
Python SDK (`mcp`, tools/python/requirements.txt): initialize, list the
tools, make each call of a plan given on stdin, then list and read the
run's resources, printing one JSON object of what the SDK saw.

    AGENTLEDGER_TOKEN=… python mcp_round_trip.py URL < plan.json
    python mcp_round_trip.py --stdio COMMAND [ARG…] < plan.json

Over Streamable HTTP to URL (the bearer token taken from AGENTLEDGER_TOKEN,
never from the command line), or over STDIO to a server the SDK starts as a
subprocess. The plan is a JSON array of [tool, arguments] pairs. Used by
tests/mcp.rs.
"""

import asyncio
import json
import os
import sys

from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp.client.streamable_http import create_mcp_http_client, streamable_http_client


def plain(model):
    return model.model_dump(mode="json", by_alias=True, exclude_none=True)


async def session_round_trip(read, write, plan):
    async with ClientSession(read, write) as session:
        init = await session.initialize()
        listed = await session.list_tools()
        calls = []
        for name, arguments in plan:
            result = await session.call_tool(name, arguments)
            calls.append(plain(result))
        # The run's resources, read after the calls (the trail shows them).
        resources = {}
        for r in (await session.list_resources()).resources:
            read = await session.read_resource(str(r.uri))
            resources[str(r.uri)] = [plain(c) for c in read.contents]
        return {
            "protocol": init.protocol_version,
            "server": plain(init.server_info),
            "tools": [plain(t) for t in listed.tools],
            "calls": calls,
            "resources": resources,
        }


async def over_http(url, token, plan):
    headers = {"Authorization": f"Bearer {token}"}
    async with create_mcp_http_client(headers=headers) as http:
        async with streamable_http_client(url, http_client=http) as (read, write):
            return await session_round_trip(read, write, plan)


async def over_stdio(command, args, plan):
    server = StdioServerParameters(command=command, args=args)
    async with stdio_client(server) as (read, write):
        return await session_round_trip(read, write, plan)


def main():
    plan = json.load(sys.stdin)
    if sys.argv[1] == "--stdio":
        seen = over_stdio(sys.argv[2], sys.argv[3:], plan)
    else:
        seen = over_http(sys.argv[1], os.environ["AGENTLEDGER_TOKEN"], plan)
    print(json.dumps(asyncio.run(seen)))


if __name__ == "__main__":
    main()
