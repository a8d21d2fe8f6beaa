// Preloaded into a child process (`node --import`) to run it on a host whose wall clock is off by
// TEST_CLOCK_OFFSET_MS (negative: behind) from the start, as on a host whose clock drifted: Date
// and performance.timeOrigin read the shifted clock. Each SIGUSR2 then steps the wall clock by
// TEST_CLOCK_STEP_MS, as NTP or an operator would: Date moves, timeOrigin (taken at start) does
// not. Timers and performance.now() keep real time, as they do on such a host.

let offsetMs = Number(process.env['TEST_CLOCK_OFFSET_MS'] ?? '0');
const stepMs = Number(process.env['TEST_CLOCK_STEP_MS'] ?? '0');
const RealDate = Date;

Object.defineProperty(performance, 'timeOrigin', { value: performance.timeOrigin + offsetMs });

class ShiftedDate extends RealDate {
  constructor(...args: ConstructorParameters<DateConstructor> | []) {
    if (args.length === 0) super(RealDate.now() + offsetMs);
    else super(...(args as ConstructorParameters<DateConstructor>));
  }

  static override now(): number {
    return RealDate.now() + offsetMs;
  }
}

globalThis.Date = ShiftedDate as DateConstructor;

process.on('SIGUSR2', () => {
  offsetMs += stepMs;
});
