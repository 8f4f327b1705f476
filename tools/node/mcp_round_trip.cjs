// One agent's round trip with a run's MCP server through the official MCP
// TypeScript SDK (@modelcontextprotocol/sdk, tools/node/package.json), over
// Streamable HTTP: initialize, list the tools, make each call of a plan
// given on stdin, then list and read the run's resources, printing one
// JSON object of what the SDK saw (as tools/python/mcp_round_trip.py does).
//
//   AGENTLEDGER_TOKEN=… NODE_PATH=$(tools/node/setup.sh)/node_modules node mcp_round_trip.cjs URL < plan.json
//
// The bearer token is taken from AGENTLEDGER_TOKEN, never from the command
// line. The plan is a JSON array of [tool, arguments] pairs. Used by
// tests/mcp.rs.
'use strict';

const { Client } = require('@modelcontextprotocol/sdk/client/index.js');
const { StreamableHTTPClientTransport } = require('@modelcontextprotocol/sdk/client/streamableHttp.js');

async function main() {
  const url = new URL(process.argv[2]);
  const plan = JSON.parse(require('node:fs').readFileSync(0, 'utf8'));
  const transport = new StreamableHTTPClientTransport(url, {
    requestInit: { headers: { Authorization: `Bearer ${process.env.AGENTLEDGER_TOKEN}` } },
  });
  const client = new Client({ name: 'agentledger-tests', version: '1.0.0' });
  await client.connect(transport);
  const tools = (await client.listTools()).tools;
  const calls = [];
  for (const [name, args] of plan) {
    calls.push(await client.callTool({ name, arguments: args }));
  }
  const resources = {};
  for (const r of (await client.listResources()).resources) {
    resources[r.uri] = (await client.readResource({ uri: r.uri })).contents;
  }
  const seen = {
    protocol: transport.protocolVersion,
    session: transport.sessionId !== undefined,
    server: client.getServerVersion(),
    tools,
    calls,
    resources,
  };
  await transport.terminateSession();
  await client.close();
  process.stdout.write(JSON.stringify(seen) + '\n');
}

main().catch((e) => {
  process.stderr.write(`${e.stack || e}\n`);
  process.exit(1);
});
