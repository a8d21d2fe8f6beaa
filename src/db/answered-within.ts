// A bound on how long to wait for the database's answer. A connection gone silent (a failover, a
// NAT's timeout: no reset) answers nothing until the client's query deadline, which is as long as
// a lease, or ever (a goodbye): the worker goes on without the answer to one try of a write instead,
// while what it sent may still run — every such write of the worker's is safe to be left behind
// (fencing, a claim given back by its id); a close drops the connection (pg-goodbye.ts).

/** A try left behind: it may still run, and commit. */
export class NoAnswerInTime extends Error {}

/** `work`, or NoAnswerInTime once `ms` have passed without its answer (work goes on, unheard); `work` itself for an infinite `ms`. */
export function answeredWithin<T>(work: Promise<T>, ms: number): Promise<T> {
  // (No bound: a timer of Infinity would fire at once.)
  if (!Number.isFinite(ms)) return work;
  work.catch(() => {});
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<never>((_, reject) => {
    timer = setTimeout(
      () => reject(new NoAnswerInTime(`no answer from the database within ${Math.round(ms)} ms`)),
      ms,
    );
  });
  return Promise.race([work, late]).finally(() => clearTimeout(timer));
}
