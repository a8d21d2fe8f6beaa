// A tiny webhook receiver for trying herald by hand: prints each request's Standard Webhooks
// headers and body, answers 204. `npm run receiver` (PORT_RECEIVER, default 9000).

import http from 'node:http';

const port = Number(process.env['PORT_RECEIVER'] ?? 9000);
http
  .createServer((request, response) => {
    const chunks: Buffer[] = [];
    request.on('data', (chunk: Buffer) => chunks.push(chunk));
    request.on('end', () => {
      const h = request.headers;
      console.log(
        `${new Date().toISOString()} ${request.method} ${request.url} webhook-id=${h['webhook-id']} ` +
          `webhook-timestamp=${h['webhook-timestamp']} webhook-signature=${h['webhook-signature']}\n` +
          `  ${Buffer.concat(chunks).toString('utf8')}`,
      );
      response.writeHead(204).end();
    });
  })
  .on('error', (error: NodeJS.ErrnoException) => {
    console.error(
      error.code === 'EADDRINUSE'
        ? `receiver: port ${port} is in use; set PORT_RECEIVER to another (and the endpoint's URL with it)`
        : `receiver: ${error.message}`,
    );
    process.exit(1);
  })
  .listen(port, '127.0.0.1', () => console.log(`receiver listening on http://127.0.0.1:${port}/`));
