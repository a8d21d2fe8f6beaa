// GET /openapi.json and GET /docs: public, outside /api/v1 (so the authentication hook leaves
// them alone). The reference page is one self-contained file: it loads nothing from anywhere
// but this server, and its Content-Security-Policy says so to the browser.

import crypto from 'node:crypto';
import { readFileSync } from 'node:fs';
import type { FastifyPluginAsync } from 'fastify';
import { renderOpenApiDocument } from './document.ts';

const PAGE = readFileSync(new URL('./docs.html', import.meta.url), 'utf8');

function contentSecurityPolicy(page: string): string {
  const scripts = [...page.matchAll(/<script>([\s\S]*?)<\/script>/g)].map(
    ([, body]) => `'sha256-${crypto.createHash('sha256').update(body!).digest('base64')}'`,
  );
  return [
    "default-src 'none'",
    `script-src ${scripts.join(' ')}`,
    "style-src 'unsafe-inline'",
    "connect-src 'self'",
    "img-src 'self' data:",
    "base-uri 'none'",
    "form-action 'none'",
    "frame-ancestors 'none'",
  ].join('; ');
}

export const openApiRoutes = (): FastifyPluginAsync => async (app) => {
  const document = renderOpenApiDocument();
  const csp = contentSecurityPolicy(PAGE);

  app.get('/openapi.json', async (_request, reply) =>
    reply.type('application/json; charset=utf-8').send(document),
  );
  app.get('/docs', async (_request, reply) =>
    reply.type('text/html; charset=utf-8').header('content-security-policy', csp).send(PAGE),
  );
};
