'use strict';
// The minimal Node.js server the bench compares the wrapper with: a bare http.createServer that
// calls the same handler as the wrapper and answers with its JSON result. No logs, no context,
// no errors: the floor of what node:http costs per request, not a runtime.
//
//   node http_server.js PORT CODE_DIR   (requires handler.handle from CODE_DIR)

const http = require('node:http');
const path = require('node:path');

const [port, codeDir] = process.argv.slice(2);
const { handle } = require(path.resolve(codeDir, 'handler.js'));

http.createServer((req, res) => {
  const chunks = [];
  req.on('data', (chunk) => chunks.push(chunk));
  req.on('end', async () => {
    const body = Buffer.concat(chunks);
    const out = JSON.stringify(await handle(body.length ? JSON.parse(body) : null, {}));
    res.writeHead(200, { 'Content-Type': 'application/json', 'Content-Length': Buffer.byteLength(out) });
    res.end(out);
  });
}).listen(Number(port), '127.0.0.1', () => console.log('ready'));
