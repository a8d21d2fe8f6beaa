// Time for deadlines: milliseconds on the epoch's scale that never run back. A lease's end, a
// request's start limit and the waits at an origin are measured on it.
//
// It runs on the process's monotonic clock, so that a step back of the host's wall clock (NTP
// correcting a drift, an operator's `date -s`) cannot stretch a deadline. But the monotonic clock
// stands still while the host is suspended (a laptop's sleep, a paused VM), and a lease runs on in
// the database meanwhile: so whenever the wall clock is found further ahead of the monotonic one
// than ever before, this clock takes the lead too. A deadline passes when either clock says so.

let lead = 0;

export function steadyNow(): number {
  const monotonic = performance.timeOrigin + performance.now();
  const wallAhead = Date.now() - monotonic;
  if (wallAhead > lead) lead = wallAhead;
  return monotonic + lead;
}
