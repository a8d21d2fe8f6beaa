// Failpoints: named places where a test can make this process die at once (SIGKILL), to prove
// what survives a crash at exactly that moment. Inert unless HERALD_FAILPOINTS names the point;
// read once at start-up.

const armed = new Set(
  (process.env['HERALD_FAILPOINTS'] ?? '')
    .split(',')
    .map((s) => s.trim())
    .filter(Boolean),
);

export type FailpointName = 'ingest.before_claim' | 'ingest.after_commit' | 'attempt.after_send';

export function failpoint(name: FailpointName): void {
  if (armed.has(name)) process.kill(process.pid, 'SIGKILL');
}
