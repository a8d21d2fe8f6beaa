// Preloaded into a child process (`node --import`) to run it with its wall clock off by
// TEST_CLOCK_OFFSET_MS (negative: behind), as on a host whose clock drifted. Date.now() and
// `new Date()` read the shifted clock; timers and performance.now() keep real time, as they do
// on such a host.

const offsetMs = Number(process.env['TEST_CLOCK_OFFSET_MS'] ?? '0');
const RealDate = Date;

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
