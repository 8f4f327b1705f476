// The MCP conformance suite (@modelcontextprotocol/conformance, server
// scenarios) against a run's endpoint. The suite's CLI takes only a URL,
// and the endpoint wants a bearer token: a proxy on 127.0.0.1 adds the
// Authorization header from AGENTLEDGER_TOKEN to every request and passes
// everything else through unchanged (Host and Origin too, which the
// suite's DNS-rebinding scenario sets on purpose), so no token is ever in
// a URL.
//
//   AGENTLEDGER_TOKEN=… NODE_PATH=$(tools/node/setup.sh)/node_modules node conformance.cjs URL OUTDIR
//
// Runs the active server suite with tools/node/conformance-baseline.yml as
// the expected failures and exits as the suite does: 0 when exactly the
// baseline's scenarios fail. Used by tests/mcp.rs.
'use strict';

const http = require('node:http');
const path = require('node:path');
const { spawn } = require('node:child_process');

const target = new URL(process.argv[2]);
const outDir = process.argv[3];
const token = process.env.AGENTLEDGER_TOKEN;

const proxy = http.createServer((req, res) => {
  const headers = { ...req.headers, authorization: `Bearer ${token}` };
  const up = http.request(
    { host: target.hostname, port: target.port, path: req.url, method: req.method, headers },
    (r) => {
      res.writeHead(r.statusCode, r.headers);
      r.pipe(res);
    },
  );
  up.on('error', (e) => {
    res.writeHead(502, { 'content-type': 'text/plain' });
    res.end(`proxy: ${e}`);
  });
  req.pipe(up);
});

proxy.listen(0, '127.0.0.1', () => {
  const url = `http://127.0.0.1:${proxy.address().port}${target.pathname}`;
  const cli = require.resolve('@modelcontextprotocol/conformance/dist/index.js');
  const suite = spawn(
    process.execPath,
    [cli, 'server', '--url', url, '--expected-failures', path.join(__dirname, 'conformance-baseline.yml'), '-o', outDir],
    { stdio: ['ignore', 'inherit', 'inherit'] },
  );
  suite.on('exit', (code, signal) => {
    proxy.close();
    if (signal) process.stderr.write(`conformance: killed by ${signal}\n`);
    process.exit(code ?? 1);
  });
});
