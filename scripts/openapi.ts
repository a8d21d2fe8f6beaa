// npm run openapi: writes herald's OpenAPI document to openapi.json at the repository root, the
// committed copy that test/openapi.test.ts compares with what the route table generates.

import { writeFileSync } from 'node:fs';
import { renderOpenApiDocument } from '../src/api/openapi/document.ts';

const target = new URL('../openapi.json', import.meta.url);
writeFileSync(target, renderOpenApiDocument());
process.stdout.write(`wrote ${target.pathname}\n`);
