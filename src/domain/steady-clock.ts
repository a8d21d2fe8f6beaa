// Time for deadlines: milliseconds on the epoch's scale, read from the process's monotonic clock.
// A lease's end, a request's start limit and the waits at an origin are measured on it, so that a
// step of the host's wall clock (NTP correcting a drift, a VM resumed, an operator's `date -s`)
// neither stretches nor shortens them. It reads like Date.now() did when the process started, and
// then moves only forward, at the rate of real time.

export function steadyNow(): number {
  return performance.timeOrigin + performance.now();
}
