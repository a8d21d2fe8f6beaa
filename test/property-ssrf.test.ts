// Properties of the destination address policy (createAddressPolicy, src/sender/destination.ts):
// every address inside every forbidden range, in every spelling a URL or a resolver can carry, is
// refused; addresses outside all of them pass; an allow-list opens exactly its own addresses.
//
// Deterministic: a fixed seed (PROPERTY_SEED overrides it); PROPERTY_RUNS overrides every numRuns
// for longer local runs. A failure prints the seed and the shrunk counterexample.

import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { isIP, isIPv4, isIPv6 } from 'node:net';
import { describe, test } from 'node:test';
import fc from 'fast-check';
import ipaddr from 'ipaddr.js';
import { checkDestination } from '../src/sender/check-destination.ts';
import { createAddressPolicy } from '../src/sender/destination.ts';
import type { Resolver } from '../src/sender/resolve.ts';

const SEED = Number(process.env['PROPERTY_SEED'] ?? 0x55f);
const RUNS = process.env['PROPERTY_RUNS'] === undefined ? undefined : Number(process.env['PROPERTY_RUNS']);
const params = (numRuns: number) => ({ seed: SEED, numRuns: RUNS ?? numRuns });

// ---------------------------------------------------------------------------------------------
// The ranges under test: whatever the module lists (read from its source, so a range added there
// is covered here at once), and at least the ones it lists today (so none is dropped silently).

const EXPECTED_FORBIDDEN = [
  '0.0.0.0/8',
  '10.0.0.0/8',
  '100.64.0.0/10',
  '127.0.0.0/8',
  '169.254.0.0/16',
  '172.16.0.0/12',
  '192.0.0.0/24',
  '192.0.2.0/24',
  '192.88.99.0/24',
  '192.168.0.0/16',
  '198.18.0.0/15',
  '198.51.100.0/24',
  '203.0.113.0/24',
  '224.0.0.0/4',
  '240.0.0.0/4',
  '255.255.255.255/32',
  '::/8',
  '64:ff9b::/96',
  '64:ff9b:1::/48',
  '100::/64',
  '2001::/23',
  '2001:db8::/32',
  '2002::/16',
  '3fff::/20',
  '5f00::/16',
  'fc00::/7',
  'fe80::/10',
  'fec0::/10',
  'ff00::/8',
];

function listedInModule(): string[] {
  const source = readFileSync(new URL('../src/sender/destination.ts', import.meta.url), 'utf8');
  const body = /FORBIDDEN_CIDRS[^=]*=\s*\[([\s\S]*?)\];/.exec(source)?.[1];
  assert.ok(body !== undefined, 'FORBIDDEN_CIDRS not found in src/sender/destination.ts');
  return [...body.matchAll(/'([^']+)'/g)].map((m) => m[1]!);
}
const LISTED = listedInModule();
const FORBIDDEN_CIDRS = [...new Set([...EXPECTED_FORBIDDEN, ...LISTED])];

interface Range {
  cidr: string;
  v6: boolean;
  first: bigint;
  last: bigint;
}

type Address = ipaddr.IPv4 | ipaddr.IPv6;
const toBig = (a: Address): bigint => a.toByteArray().reduce((acc, b) => (acc << 8n) | BigInt(b), 0n);

function rangeOf(cidr: string): Range {
  const [addr, prefix] = ipaddr.parseCIDR(cidr);
  const bits = addr.kind() === 'ipv4' ? 32n : 128n;
  const host = bits - BigInt(prefix);
  const first = (toBig(addr) >> host) << host;
  return { cidr, v6: bits === 128n, first, last: first + (1n << host) - 1n };
}

const RANGES = FORBIDDEN_CIDRS.map(rangeOf);
const V4_MAX = (1n << 32n) - 1n;
const V6_MAX = (1n << 128n) - 1n;
const MAPPED = rangeOf('::ffff:0:0/96');
const NAT64 = rangeOf('64:ff9b::/96');

const inRanges = (ranges: readonly Range[], v6: boolean, n: bigint) =>
  ranges.some((r) => r.v6 === v6 && r.first <= n && n <= r.last);
const forbiddenV4 = (n: bigint) => inRanges(RANGES, false, n);
/** The verdict the module's contract promises: a mapped address is judged as the IPv4 it names. */
const forbiddenV6 = (n: bigint) =>
  MAPPED.first <= n && n <= MAPPED.last ? forbiddenV4(n & V4_MAX) : inRanges(RANGES, true, n);

const v4Text = (n: bigint) => [24n, 16n, 8n, 0n].map((s) => String((n >> s) & 255n)).join('.');
const v6Groups = (n: bigint) =>
  Array.from({ length: 8 }, (_, i) => Number((n >> BigInt(112 - 16 * i)) & 0xffffn));

// ---------------------------------------------------------------------------------------------
// Spellings.

/** The WHATWG URL host parser's IPv4 forms: 1–4 parts, each decimal, octal or hex, and more. */
interface V4Spelling {
  parts: number;
  radix: ('dec' | 'oct' | 'hex')[];
  zeros: number[];
  upper: boolean;
  trailingDot: boolean;
  style: 'ascii' | 'percent' | 'fullwidth';
}
const v4SpellingArb: fc.Arbitrary<V4Spelling> = fc.record({
  parts: fc.integer({ min: 1, max: 4 }),
  radix: fc.array(fc.constantFrom<'dec' | 'oct' | 'hex'>('dec', 'oct', 'hex'), {
    minLength: 4,
    maxLength: 4,
  }),
  zeros: fc.array(fc.nat({ max: 3 }), { minLength: 4, maxLength: 4 }),
  upper: fc.boolean(),
  trailingDot: fc.boolean(),
  style: fc.constantFrom<V4Spelling['style']>('ascii', 'ascii', 'percent', 'fullwidth'),
});

function spellV4(n: bigint, s: V4Spelling): string {
  const octets = [24n, 16n, 8n, 0n].map((shift) => (n >> shift) & 255n);
  const values = octets.slice(0, s.parts - 1);
  values.push(n & ((1n << BigInt(8 * (5 - s.parts))) - 1n));
  const text = values
    .map((v, i) => {
      const zeros = '0'.repeat(s.zeros[i]!);
      if (s.radix[i] === 'oct') return `0${zeros}${v.toString(8)}`;
      if (s.radix[i] === 'hex') {
        const hex = `${s.upper ? '0X' : '0x'}${zeros}${v.toString(16)}`;
        return s.upper ? hex.toUpperCase() : hex;
      }
      return v.toString(10);
    })
    .join('.');
  const dotted = s.trailingDot ? `${text}.` : text;
  if (s.style === 'percent') {
    // The host is percent-decoded before it is parsed as an address.
    return [...dotted].map((c) => `%${c.charCodeAt(0).toString(16).padStart(2, '0')}`).join('');
  }
  if (s.style === 'fullwidth') {
    // IDNA maps full-width digits, letters and the ideographic full stop to ASCII.
    return [...dotted]
      .map((c) => (c === '.' ? '\u3002' : String.fromCharCode(c.charCodeAt(0) + 0xfee0)))
      .join('');
  }
  return dotted;
}

/** RFC 4291 text forms: any padding, any case, any one run of zero groups compressed, dotted tail. */
interface V6Spelling {
  pad: number[];
  upper: boolean;
  compress: number | null;
  dotted: boolean;
}
const v6SpellingArb: fc.Arbitrary<V6Spelling> = fc.record({
  pad: fc.array(fc.nat({ max: 4 }), { minLength: 8, maxLength: 8 }),
  upper: fc.boolean(),
  compress: fc.option(fc.nat(), { nil: null }),
  dotted: fc.boolean(),
});

function spellV6(n: bigint, s: V6Spelling): string {
  const groups = v6Groups(n);
  const hexCount = s.dotted ? 6 : 8;
  const hex = groups.slice(0, hexCount).map((g, i) => {
    const text = g.toString(16).padStart(s.pad[i]!, '0');
    return s.upper ? text.toUpperCase() : text;
  });
  const tail = s.dotted ? [v4Text(n & V4_MAX)] : [];
  // Every [a, b) of consecutive zero groups may be written as "::".
  const spans: [number, number][] = [];
  for (let a = 0; a < hexCount; a++) {
    for (let b = a + 1; b <= hexCount && groups[b - 1] === 0; b++) spans.push([a, b]);
  }
  if (s.compress === null || spans.length === 0) return [...hex, ...tail].join(':');
  const [a, b] = spans[s.compress % spans.length]!;
  return `${hex.slice(0, a).join(':')}::${[...hex.slice(b), ...tail].join(':')}`;
}

const zoneArb = fc.option(fc.stringMatching(/^[a-z0-9]{1,8}$/), { nil: null });

const insideArb = (r: Range) =>
  fc.oneof(fc.constant(r.first), fc.constant(r.last), fc.bigInt({ min: r.first, max: r.last }));

// ---------------------------------------------------------------------------------------------

const policy = createAddressPolicy([]);

let resolverCalls = 0;
/** IP literals must never reach a resolver: counted, and the count checked. */
const noResolver: Resolver = async () => {
  resolverCalls++;
  return [];
};

async function urlVerdict(host: string): Promise<boolean> {
  const before = resolverCalls;
  const verdict = await checkDestination(`http://${host}:8080/hook?x=1`, policy, noResolver);
  assert.equal(resolverCalls, before, `${host} is a literal, yet it was resolved`);
  return verdict.ok;
}

describe('the module lists the forbidden ranges this file tests', () => {
  test('none of the expected ranges is gone from FORBIDDEN_CIDRS', () => {
    for (const cidr of EXPECTED_FORBIDDEN) assert.ok(LISTED.includes(cidr), `${cidr} is no longer forbidden`);
  });
});

describe('every address inside a forbidden IPv4 range is refused, however it is spelled', () => {
  for (const range of RANGES.filter((r) => !r.v6)) {
    test(range.cidr, async () => {
      await fc.assert(
        fc.asyncProperty(insideArb(range), v4SpellingArb, v6SpellingArb, async (n, spelling, v6Spelling) => {
          const dotted = v4Text(n);
          assert.equal(policy.isForbidden(dotted), true, dotted);
          const spelled = spellV4(n, spelling);
          assert.equal(
            new URL(`http://${spelled}/`).hostname,
            dotted,
            `${spelled} does not denote ${dotted}`,
          );
          assert.equal(await urlVerdict(spelled), false, `http://${spelled}/ was accepted`);
          // IPv4-mapped IPv6 reaches the same host, so it is the same verdict.
          const mapped = spellV6((0xffffn << 32n) | n, v6Spelling);
          assert.ok(isIPv6(mapped), `generator: ${mapped}`);
          assert.equal(policy.isForbidden(mapped), true, mapped);
          assert.equal(await urlVerdict(`[${mapped}]`), false, `http://[${mapped}]/ was accepted`);
        }),
        params(60),
      );
    });
  }
});

describe('every address inside a forbidden IPv6 range is refused, however it is spelled', () => {
  for (const range of RANGES.filter((r) => r.v6)) {
    test(range.cidr, async () => {
      // ::/8 contains the IPv4-mapped block, which is judged as IPv4 (its own property below).
      const inside = insideArb(range).filter((n) => !(MAPPED.first <= n && n <= MAPPED.last));
      await fc.assert(
        fc.asyncProperty(inside, v6SpellingArb, zoneArb, async (n, spelling, zone) => {
          const text = spellV6(n, spelling);
          assert.ok(isIPv6(text), `generator: ${text}`);
          assert.equal(policy.isForbidden(text), true, text);
          // A resolver may print a zone id; the zone never makes an address acceptable.
          if (zone !== null) assert.equal(policy.isForbidden(`${text}%${zone}`), true, `${text}%${zone}`);
          assert.equal(await urlVerdict(`[${text}]`), false, `http://[${text}]/ was accepted`);
        }),
        params(60),
      );
    });
  }
});

const anyV4 = fc.oneof(
  fc.bigInt({ min: 0n, max: V4_MAX }),
  fc.constantFrom(...RANGES.filter((r) => !r.v6)).chain(insideArb),
);

describe('IPv4 inside IPv6', () => {
  test('mapped is judged as the IPv4 it names; compatible, NAT64, 6to4 and Teredo are refused whatever they embed', () => {
    fc.assert(
      fc.property(
        anyV4,
        v6SpellingArb,
        fc.bigInt({ min: 0n, max: (1n << 80n) - 1n }),
        (n, spelling, noise) => {
          const v4Verdict = policy.isForbidden(v4Text(n));
          assert.equal(v4Verdict, forbiddenV4(n));
          const mapped = spellV6((0xffffn << 32n) | n, spelling);
          assert.equal(policy.isForbidden(mapped), v4Verdict, `${mapped} vs ${v4Text(n)}`);
          const tunnels = {
            compatible: n,
            nat64: (0x64ff9bn << 96n) | n,
            localNat64: (0x64ff9b0001n << 80n) | (noise & ((1n << 80n) - 1n) & ~V4_MAX) | n,
            sixToFour: (0x2002n << 112n) | (n << 80n) | (noise & ((1n << 80n) - 1n)),
            teredo: (0x20010000n << 96n) | ((noise & ((1n << 64n) - 1n)) << 32n) | (n ^ V4_MAX),
          };
          for (const [kind, value] of Object.entries(tunnels)) {
            const text = spellV6(value, spelling);
            assert.equal(policy.isForbidden(text), true, `${kind} ${text} embeds ${v4Text(n)}`);
          }
        },
      ),
      params(1500),
    );
  });
});

// Neighbours of every forbidden range: an off-by-one in a mask lands exactly here.
const NEIGHBOURS_V4 = RANGES.filter((r) => !r.v6)
  .flatMap((r) => [r.first - 1n, r.last + 1n])
  .filter((n) => n >= 0n && n <= V4_MAX);
const NEIGHBOURS_V6 = RANGES.filter((r) => r.v6)
  .flatMap((r) => [r.first - 1n, r.last + 1n])
  .filter((n) => n >= 0n && n <= V6_MAX);

// Filtered twice: by the range arithmetic above and by ipaddr.js's own CIDR matching.
const PARSED_CIDRS = FORBIDDEN_CIDRS.map((cidr) => ipaddr.parseCIDR(cidr));
function ipaddrForbids(text: string): boolean {
  const parsed = ipaddr.parse(text);
  const judged =
    parsed instanceof ipaddr.IPv6 && parsed.isIPv4MappedAddress() ? parsed.toIPv4Address() : parsed;
  return PARSED_CIDRS.some(([net, bits]) => net.kind() === judged.kind() && judged.match(net, bits));
}
const compact = (n: bigint) =>
  spellV6(n, { pad: [0, 0, 0, 0, 0, 0, 0, 0], upper: false, compress: null, dotted: false });

const publicV4 = fc
  .oneof(fc.bigInt({ min: 0n, max: V4_MAX }), fc.constantFrom(...NEIGHBOURS_V4))
  .filter((n) => !forbiddenV4(n) && !ipaddrForbids(v4Text(n)));
const publicV6 = fc
  .oneof(
    fc.bigInt({ min: 0n, max: V6_MAX }),
    fc.bigInt({ min: 0x2000n << 112n, max: (0x4000n << 112n) - 1n }),
    fc.constantFrom(...NEIGHBOURS_V6),
  )
  .filter((n) => !forbiddenV6(n) && !ipaddrForbids(compact(n)));

describe('addresses outside every forbidden range pass', () => {
  test('public IPv4, in any spelling and IPv4-mapped', async () => {
    await fc.assert(
      fc.asyncProperty(publicV4, v4SpellingArb, v6SpellingArb, async (n, spelling, v6Spelling) => {
        const dotted = v4Text(n);
        assert.equal(policy.isForbidden(dotted), false, dotted);
        const spelled = spellV4(n, spelling);
        assert.equal(await urlVerdict(spelled), true, `http://${spelled}/ was refused`);
        const mapped = spellV6((0xffffn << 32n) | n, v6Spelling);
        assert.equal(policy.isForbidden(mapped), false, mapped);
      }),
      params(1500),
    );
  });

  test('public IPv6, in any spelling', async () => {
    await fc.assert(
      fc.asyncProperty(publicV6, v6SpellingArb, async (n, spelling) => {
        const text = spellV6(n, spelling);
        assert.ok(isIPv6(text), `generator: ${text}`);
        assert.equal(policy.isForbidden(text), false, text);
        assert.equal(await urlVerdict(`[${text}]`), true, `http://[${text}]/ was refused`);
      }),
      params(1500),
    );
  });

  test('a host name is refused iff one of its answers is forbidden, in whatever form the resolver prints it', async () => {
    const answer = fc.oneof(
      publicV4.map((n) => ({ text: v4Text(n), bad: false })),
      fc.tuple(publicV6, v6SpellingArb).map(([n, s]) => ({ text: spellV6(n, s), bad: false })),
      anyV4.map((n) => ({ text: v4Text(n), bad: forbiddenV4(n) })),
      fc
        .tuple(fc.constantFrom(...RANGES.filter((r) => r.v6)).chain(insideArb), v6SpellingArb)
        .map(([n, s]) => ({ text: spellV6(n, s), bad: forbiddenV6(n) })),
    );
    await fc.assert(
      fc.asyncProperty(fc.array(answer, { minLength: 1, maxLength: 4 }), async (answers) => {
        const resolve: Resolver = async () =>
          answers.map((a) => ({ address: a.text, family: isIPv4(a.text) ? (4 as const) : (6 as const) }));
        const verdict = await checkDestination('https://hooks.example.com/x', policy, resolve);
        assert.equal(verdict.ok, !answers.some((a) => a.bad), JSON.stringify(answers));
      }),
      params(500),
    );
  });
});

// ipaddr.js's own table of special-purpose ranges, as an independent oracle: whatever it calls
// private, local, reserved, documentation, multicast or a translation block is never a destination.
// (AS112, AMT, ORCHID and DRIP are globally routable; herald may go either way on those.)
const IPADDR_MUST_FORBID = new Set([
  'unspecified',
  'broadcast',
  'multicast',
  'linkLocal',
  'loopback',
  'carrierGradeNat',
  'private',
  'reserved',
  'uniqueLocal',
  'deprecatedSiteLocal',
  'discard',
  'rfc6145',
  'rfc6052',
  '6to4',
  'teredo',
  'benchmarking',
  'segmentRouting',
]);
const IPADDR_SPECIAL = [
  ...['0.0.0.0/8', '255.255.255.255/32', '224.0.0.0/4', '169.254.0.0/16', '127.0.0.0/8', '100.64.0.0/10'],
  ...['10.0.0.0/8', '172.16.0.0/12', '192.168.0.0/16', '192.0.0.0/24', '192.0.2.0/24', '192.88.99.0/24'],
  ...['198.18.0.0/15', '198.51.100.0/24', '203.0.113.0/24', '240.0.0.0/4', '192.175.48.0/24'],
  ...['192.31.196.0/24', '192.52.193.0/24', '::/128', 'fe80::/10', 'ff00::/8', '::1/128', 'fc00::/7'],
  ...['::ffff:0:0/96', 'fec0::/10', '100::/64', '::ffff:0:0:0/96', '64:ff9b::/96', '64:ff9b:1::/48'],
  ...['2002::/16', '2001::/32', '2001:2::/48', '2001:3::/32', '2001:4:112::/48', '2620:4f:8000::/48'],
  ...['2001:10::/28', '2001:20::/28', '2001:30::/28', '5f00::/16', '2001::/23', '2001:db8::/32', '3fff::/20'],
].map(rangeOf);

describe('agreement with ipaddr.js', () => {
  test('every address ipaddr.js classes as non-public is forbidden; mapped ones follow their IPv4', () => {
    const address = fc.oneof(
      fc.constantFrom(...IPADDR_SPECIAL).chain((r) => insideArb(r).map((n) => ({ n, v6: r.v6 }))),
      fc.constantFrom(...RANGES).chain((r) => insideArb(r).map((n) => ({ n, v6: r.v6 }))),
      fc.bigInt({ min: 0n, max: V4_MAX }).map((n) => ({ n, v6: false })),
      fc.bigInt({ min: 0n, max: V6_MAX }).map((n) => ({ n, v6: true })),
    );
    fc.assert(
      fc.property(address, ({ n, v6 }) => {
        const text = v6
          ? spellV6(n, { pad: [0, 0, 0, 0, 0, 0, 0, 0], upper: false, compress: 0, dotted: false })
          : v4Text(n);
        const parsed = ipaddr.parse(text);
        const kind = parsed.range();
        const verdict = policy.isForbidden(text);
        if (parsed instanceof ipaddr.IPv6 && kind === 'ipv4Mapped') {
          assert.equal(verdict, policy.isForbidden(parsed.toIPv4Address().toString()), text);
        } else if (IPADDR_MUST_FORBID.has(kind)) {
          assert.equal(verdict, true, `${text} is ${kind} for ipaddr.js`);
        }
        // And the module's verdict is exactly its list.
        assert.equal(verdict, v6 ? forbiddenV6(n) : forbiddenV4(n), text);
      }),
      params(3000),
    );
  });
});

describe('allow-list', () => {
  const cidrArb = fc.oneof(
    // The base need not be the network address (10.1.2.3/8 is accepted and masked).
    fc.tuple(anyV4, fc.integer({ min: 0, max: 32 })).map(([n, prefix]) => ({ v6: false, n, prefix })),
    fc
      .tuple(
        fc.oneof(
          fc.bigInt({ min: 0n, max: V6_MAX }),
          fc.constantFrom(...RANGES.filter((r) => r.v6), MAPPED).chain(insideArb),
        ),
        fc.integer({ min: 0, max: 128 }),
      )
      .map(([n, prefix]) => ({ v6: true, n, prefix })),
  );

  /**
   * The contract: allowed when the address, or the IPv4 host a mapped address names, is listed;
   * but an address of NAT64's well-known prefix that names a forbidden IPv4 host is allowed only
   * when that host is listed too.
   */
  function expectedWith(ranges: readonly Range[], v6: boolean, n: bigint): boolean {
    const mapped = v6 && MAPPED.first <= n && n <= MAPPED.last;
    const viaNat64 = v6 && NAT64.first <= n && n <= NAT64.last;
    if (viaNat64 && forbiddenV4(n & V4_MAX) && !inRanges(ranges, false, n & V4_MAX)) return true;
    const allowed = inRanges(ranges, v6, n) || (mapped && inRanges(ranges, false, n & V4_MAX));
    return allowed ? false : v6 ? forbiddenV6(n) : forbiddenV4(n);
  }

  test('an allowed CIDR lets exactly its own addresses through; the rest keep their verdict', () => {
    fc.assert(
      fc.property(
        fc.array(cidrArb, { minLength: 1, maxLength: 3 }),
        fc.array(fc.tuple(fc.nat(), fc.bigInt({ min: 0n, max: V6_MAX }), fc.nat({ max: 4 })), {
          minLength: 1,
          maxLength: 12,
        }),
        v6SpellingArb,
        fc.constantFrom('', ' ', '  '),
        (cidrs, probes, spelling, space) => {
          const ranges = cidrs.map((c) => {
            const text = c.v6 ? spellV6(c.n, spelling) : v4Text(c.n);
            return { ...rangeOf(`${text}/${c.prefix}`), text: `${space}${text}/${c.prefix}${space}` };
          });
          const allowing = createAddressPolicy(ranges.map((r) => r.text));
          const listed = ranges.map((x) => x.text.trim()).join(',');
          for (const [which, noise, how] of probes) {
            const r = ranges[which % ranges.length]!;
            const size = r.last - r.first + 1n;
            // Inside (first, last, anywhere), just outside, or anywhere at all.
            const candidates = [r.first, r.last, r.first + (noise % size), r.first - 1n, r.last + 1n];
            const max = r.v6 ? V6_MAX : V4_MAX;
            let n = how < 5 ? candidates[how]! : noise & max;
            if (n < 0n || n > max) n = noise & max;
            const text = r.v6 ? spellV6(n, spelling) : v4Text(n);
            assert.equal(
              allowing.isForbidden(text),
              expectedWith(ranges, r.v6, n),
              `${text} with allow-list ${listed}`,
            );
            if (!r.v6) {
              // The mapped form reaches the same IPv4 host.
              const m = (0xffffn << 32n) | n;
              const mapped = spellV6(m, spelling);
              assert.equal(
                allowing.isForbidden(mapped),
                expectedWith(ranges, true, m),
                `${mapped} with allow-list ${listed}`,
              );
            }
          }
        },
      ),
      params(1500),
    );
  });

  test('an invalid allow-list entry is refused at once', () => {
    fc.assert(
      fc.property(
        fc.string({ maxLength: 40 }).filter((s) => {
          try {
            ipaddr.parseCIDR(s.trim());
            return false;
          } catch {
            return true;
          }
        }),
        (entry) => {
          assert.throws(() => createAddressPolicy([entry]), /is not a CIDR/);
        },
      ),
      params(500),
    );
  });
});

describe('anything that is not an address fails closed', () => {
  test('isForbidden never throws, and refuses every string that is not an IP address', () => {
    const addressish = fc.stringMatching(/^[0-9a-fA-FxX:.%[\]/ -]{0,45}$/);
    const mangled = fc
      .tuple(fc.bigInt({ min: 0n, max: V6_MAX }), v6SpellingArb, fc.string({ maxLength: 6 }), fc.nat())
      .map(([n, s, junk, at]) => {
        const text = spellV6(n, s);
        const i = at % (text.length + 1);
        return text.slice(0, i) + junk + text.slice(i);
      });
    fc.assert(
      fc.property(fc.oneof(fc.string(), addressish, mangled), (text) => {
        let verdict: boolean;
        try {
          verdict = policy.isForbidden(text);
        } catch (error) {
          assert.fail(`isForbidden(${JSON.stringify(text)}) threw ${(error as Error).message}`);
        }
        if (isIP(text) === 0) assert.equal(verdict, true, JSON.stringify(text));
      }),
      params(3000),
    );
  });
});
