// herald is imported as its TypeScript source, so a project that type-checks its own code checks
// herald's too, under the project's settings. The README's library example is type-checked here as
// such a project would: with what `tsc --init` writes (exactOptionalPropertyTypes and
// noUncheckedIndexedAccess among them), and the one setting the README asks for besides.

import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { test } from 'node:test';
import { promisify } from 'node:util';

const ROOT = path.resolve(import.meta.dirname, '..');

/** The README's code block that opens herald as a library. */
function readmeLibraryExample(): string {
  const readme = fs.readFileSync(path.join(ROOT, 'README.md'), 'utf8');
  const block = [...readme.matchAll(/^```ts\n([\s\S]*?)^```$/gm)]
    .map((m) => m[1]!)
    .find((code) => code.includes("from 'herald'") && code.includes('createHerald'));
  assert.ok(block, 'the README shows herald opened as a library');
  return block;
}

test("the README's library example type-checks in a project with tsc --init's strict settings", async () => {
  const project = fs.mkdtempSync(path.join(os.tmpdir(), 'herald-ts-user-'));
  try {
    fs.writeFileSync(path.join(project, 'package.json'), JSON.stringify({ type: 'module', private: true }));
    // As `npm install <herald checkout>` links it, beside the packages the example uses.
    const modules = path.join(project, 'node_modules');
    fs.mkdirSync(path.join(modules, '@types'), { recursive: true });
    fs.symlinkSync(ROOT, path.join(modules, 'herald'));
    for (const name of ['pg', '@types/pg', '@types/node']) {
      fs.symlinkSync(path.join(ROOT, 'node_modules', name), path.join(modules, name));
    }
    fs.writeFileSync(
      path.join(project, 'tsconfig.json'),
      JSON.stringify({
        compilerOptions: {
          module: 'nodenext',
          target: 'esnext',
          types: ['node'],
          noUncheckedIndexedAccess: true,
          exactOptionalPropertyTypes: true,
          strict: true,
          verbatimModuleSyntax: true,
          isolatedModules: true,
          noUncheckedSideEffectImports: true,
          moduleDetection: 'force',
          skipLibCheck: true,
          // What the README asks of a project that type-checks herald.
          noEmit: true,
          allowImportingTsExtensions: true,
        },
      }),
    );
    fs.writeFileSync(path.join(project, 'index.ts'), readmeLibraryExample());
    const tsc = path.join(ROOT, 'node_modules', '.bin', 'tsc');
    const checked = await promisify(execFile)(tsc, ['-p', project]).then(
      () => '',
      (error: { stdout?: string }) => error.stdout ?? String(error),
    );
    assert.equal(checked, '', 'tsc found no error');
  } finally {
    fs.rmSync(project, { recursive: true, force: true });
  }
});
