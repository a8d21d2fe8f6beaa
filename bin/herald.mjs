#!/usr/bin/env -S node --max-semi-space-size=8
// The `herald` command (src/cli.ts), started the way it should run:
// - node's compile cache is on before anything else loads, so from the second start on herald's
//   TypeScript is neither stripped nor compiled again: start-up takes ~0.5 s instead of ~1 s and
//   ~30 MiB less memory, as the type stripper is never loaded. This launcher is JavaScript for
//   that reason: a TypeScript entry would load the stripper to read itself.
// - a young generation of 8 MiB per semi-space instead of V8's default of up to 32: a busy
//   worker's RSS stays ~100 MiB lower, at no throughput cost measured by `npm run bench`.
// - 16 threads for node's thread pool instead of 4 (unless UV_THREADPOOL_SIZE is set): host name
//   lookups run there and cannot be cancelled, so a few endpoints whose name servers never answer
//   must not hold every thread while other endpoints' lookups wait (see src/sender/resolve.ts).
//   Set before anything uses the pool, which starts with its first task.
import module from 'node:module';

// An older node cannot load TypeScript: it would stop on the first import with a stack trace that
// does not say why. One line instead, naming what is needed (package.json's engines).
const [major, minor] = process.versions.node.split('.').map(Number);
if (major < 22 || (major === 22 && minor < 19)) {
  console.error(
    `herald: needs Node 22.19 or later, which runs TypeScript; this is ${process.version} (npm scripts run the project's own Node 24)`,
  );
  process.exit(1);
}

process.env.UV_THREADPOOL_SIZE ??= '16';
module.enableCompileCache?.();
await import('../src/cli.ts');
