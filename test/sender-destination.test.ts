// Pure destination checks: URL syntax, the address policy over every forbidden range, and the
// registration-time check with stub resolvers. No sockets.

import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { checkDestinationUrl, createAddressPolicy, hostOf } from '../src/sender/destination.ts';
import { checkDestination, type Resolver } from '../src/sender/send.ts';

const policy = createAddressPolicy([]);

// One address inside each forbidden range, named by the range it stands for.
const FORBIDDEN_SAMPLES: ReadonlyArray<[range: string, address: string]> = [
  ['0.0.0.0/8', '0.1.2.3'],
  ['0.0.0.0/8', '0.0.0.0'],
  ['10.0.0.0/8', '10.200.3.4'],
  ['100.64.0.0/10', '100.127.255.254'],
  ['127.0.0.0/8', '127.0.0.1'],
  ['127.0.0.0/8', '127.255.0.9'],
  ['169.254.0.0/16', '169.254.169.254'],
  ['172.16.0.0/12', '172.31.0.1'],
  ['192.0.0.0/24', '192.0.0.170'],
  ['192.0.2.0/24', '192.0.2.10'],
  ['192.88.99.0/24', '192.88.99.1'],
  ['192.168.0.0/16', '192.168.1.1'],
  ['198.18.0.0/15', '198.19.255.1'],
  ['198.51.100.0/24', '198.51.100.7'],
  ['203.0.113.0/24', '203.0.113.99'],
  ['224.0.0.0/4', '239.255.255.250'],
  ['240.0.0.0/4', '240.0.0.1'],
  ['255.255.255.255/32', '255.255.255.255'],
  ['::/8 (unspecified)', '::'],
  ['::/8 (loopback)', '::1'],
  ['::/8 (IPv4-compatible, private inside)', '::127.0.0.1'],
  ['::/8 (IPv4-compatible, public inside)', '::8.8.8.8'],
  ['::/8 (IPv4-compatible, hex)', '::7f00:1'],
  ['::ffff:0:0/96 → 127.0.0.1', '::ffff:127.0.0.1'],
  ['::ffff:0:0/96 → 127.0.0.1, hex', '::ffff:7f00:1'],
  ['::ffff:0:0/96 → 10.0.0.1', '::ffff:a00:1'],
  ['64:ff9b::/96', '64:ff9b::7f00:1'],
  ['64:ff9b::/96, dotted', '64:ff9b::8.8.8.8'],
  ['64:ff9b:1::/48', '64:ff9b:1:abcd::1'],
  ['100::/64', '100::1'],
  ['2001::/23 (Teredo)', '2001:0:4136:e378:8000:63bf:3fff:fdd2'],
  ['2001::/23', '2001:1ff::1'],
  ['2001:db8::/32', '2001:db8::1'],
  ['2002::/16 (6to4)', '2002:7f00:1::1'],
  ['3fff::/20', '3fff:fff::1'],
  ['5f00::/16', '5f00:1::1'],
  ['fc00::/7', 'fd12:3456::1'],
  ['fe80::/10', 'fe80::1'],
  ['fe80::/10 with a zone id', 'fe80::1%eth0'],
  ['fec0::/10', 'fec0::1'],
  ['ff00::/8', 'ff02::1'],
];

const PUBLIC_SAMPLES = [
  '8.8.8.8',
  '1.1.1.1',
  '93.184.216.34',
  '100.63.255.255', // just below 100.64/10
  '172.32.0.1', // just above 172.16/12
  '192.0.3.1',
  '223.255.255.254',
  '::ffff:8.8.8.8',
  '::ffff:808:808',
  '2606:4700:4700::1111',
  '2001:4860:4860::8888',
  '2001:200::1', // just above 2001::/23
];

describe('address policy', () => {
  for (const [range, address] of FORBIDDEN_SAMPLES) {
    it(`forbids ${address} (${range})`, () => {
      assert.equal(policy.isForbidden(address), true);
    });
  }

  for (const address of PUBLIC_SAMPLES) {
    it(`allows public ${address}`, () => {
      assert.equal(policy.isForbidden(address), false);
    });
  }

  it('forbids what does not parse, including non-canonical IPv4 spellings', () => {
    for (const junk of [
      '',
      'localhost',
      '999.1.1.1',
      '1.2.3',
      '0x7f.1',
      '0177.0.0.1',
      '::g',
      '127.0.0.1/8',
    ]) {
      assert.equal(policy.isForbidden(junk), true, junk);
    }
  });

  it('lets an allowed CIDR through, and only that CIDR', () => {
    const allowing = createAddressPolicy(['127.0.0.1/32', '::1/128', '10.1.0.0/16']);
    assert.equal(allowing.isForbidden('127.0.0.1'), false);
    assert.equal(allowing.isForbidden('::ffff:127.0.0.1'), false, 'mapped form of an allowed IPv4');
    assert.equal(allowing.isForbidden('::1'), false);
    assert.equal(allowing.isForbidden('10.1.200.3'), false);
    assert.equal(allowing.isForbidden('127.0.0.2'), true);
    assert.equal(allowing.isForbidden('10.2.0.1'), true);
    assert.equal(allowing.isForbidden('::2'), true);
  });

  it('with NAT64 allowed, lets public IPv4 hosts through it and not private ones', () => {
    const nat64 = createAddressPolicy(['64:ff9b::/96']);
    assert.equal(nat64.isForbidden('64:ff9b::808:808'), false, '8.8.8.8');
    assert.equal(nat64.isForbidden('64:ff9b::8.8.8.8'), false, '8.8.8.8, dotted');
    for (const [ip, host] of [
      ['64:ff9b::a9fe:a9fe', '169.254.169.254, the metadata service'],
      ['64:ff9b::7f00:1', '127.0.0.1'],
      ['64:ff9b::a00:1', '10.0.0.1'],
      ['64:ff9b::c0a8:101', '192.168.1.1'],
    ]) {
      assert.equal(nat64.isForbidden(ip!), true, host);
    }
    // A private IPv4 host allowed on its own is allowed through the gateway too.
    const both = createAddressPolicy(['64:ff9b::/96', '10.0.0.0/8']);
    assert.equal(both.isForbidden('64:ff9b::a00:1'), false);
    assert.equal(both.isForbidden('64:ff9b::7f00:1'), true);
  });

  it('refuses an allow-list entry that is not a CIDR, naming it', () => {
    assert.throws(() => createAddressPolicy(['127.0.0.1']), /"127\.0\.0\.1" is not a CIDR/);
    assert.throws(() => createAddressPolicy(['10.0.0.0/33']), /not a CIDR/);
    // Written the standard way only: these would allow other hosts than the ones they seem to.
    for (const entry of [
      '192.168.001.010/32',
      '010.0.0.0/8',
      '127.1/8',
      '0x7f.0.0.1/32',
      'fe80::1%eth0/128',
    ]) {
      assert.throws(() => createAddressPolicy([entry]), /not a CIDR/, entry);
    }
  });
});

describe('checkDestinationUrl', () => {
  it('accepts http and https URLs', () => {
    for (const url of [
      'https://example.com/hook?x=1',
      'http://example.com:8080/',
      'https://[2606:4700::1]/',
    ]) {
      assert.equal(checkDestinationUrl(url).ok, true, url);
    }
  });

  const REJECTED: ReadonlyArray<[why: string, url: string]> = [
    ['not a URL', 'example.com/hook'],
    ['ftp scheme', 'ftp://example.com/'],
    ['file scheme', 'file:///etc/passwd'],
    ['javascript scheme', 'javascript:alert(1)'],
    ['user and password', 'https://user:pw@example.com/'],
    ['user only', 'https://user@example.com/'],
    ['newline', 'https://example.com/a\nb'],
    ['carriage return', 'https://example.com/\r\nX-Injected: 1'],
    ['tab', 'https://exa\tmple.com/'],
    ['space', 'https://example.com/a b'],
    ['a leading NUL', '\u0000https://example.com/'],
    ['a control character', 'https://example.com/\u0007'],
    ['DEL', 'https://example.com/\u007f'],
    ['too long', `https://example.com/${'a'.repeat(2048)}`],
  ];
  for (const [why, url] of REJECTED) {
    it(`rejects ${why}`, () => {
      const verdict = checkDestinationUrl(url);
      assert.equal(verdict.ok, false);
    });
  }

  it('sees alternate IPv4 spellings as the dotted quad WHATWG normalises them to', () => {
    for (const spelling of ['2130706433', '0177.0.0.1', '0x7f.1', '0x7f000001', '127.1', '127.0.1']) {
      const verdict = checkDestinationUrl(`http://${spelling}:8080/`);
      assert.ok(verdict.ok, spelling);
      assert.equal(hostOf(verdict.url), '127.0.0.1', spelling);
      assert.equal(policy.isForbidden(hostOf(verdict.url)), true, spelling);
    }
  });

  it('strips the brackets of an IPv6 literal and keeps embedded IPv4 forms judgeable', () => {
    const cases: ReadonlyArray<[url: string, host: string]> = [
      ['http://[::1]/', '::1'],
      ['http://[::127.0.0.1]/', '::7f00:1'],
      ['http://[::ffff:127.0.0.1]/', '::ffff:7f00:1'],
      ['http://[64:ff9b::127.0.0.1]/', '64:ff9b::7f00:1'],
    ];
    for (const [url, host] of cases) {
      const verdict = checkDestinationUrl(url);
      assert.ok(verdict.ok, url);
      assert.equal(hostOf(verdict.url), host);
      assert.equal(policy.isForbidden(host), true, url);
    }
  });
});

describe('checkDestination (registration time)', () => {
  const answering =
    (...addresses: string[]): Resolver =>
    async () =>
      addresses.map((address) => ({ address, family: address.includes(':') ? 6 : 4 }));

  it('judges a literal address without resolving', async () => {
    const resolve: Resolver = () => assert.fail('a literal must not be resolved');
    assert.equal((await checkDestination('http://2130706433/', policy, resolve)).ok, false);
    assert.equal((await checkDestination('http://[::ffff:7f00:1]/', policy, resolve)).ok, false);
    assert.equal((await checkDestination('https://8.8.8.8/', policy, resolve)).ok, true);
  });

  it('accepts a name whose every address is public', async () => {
    const verdict = await checkDestination(
      'https://hooks.example/x',
      policy,
      answering('8.8.8.8', '2606:4700::1'),
    );
    assert.equal(verdict.ok, true);
  });

  it('refuses a name with any forbidden address among public ones', async () => {
    for (const answers of [
      ['8.8.8.8', '10.0.0.1'],
      ['10.0.0.1', '8.8.8.8'],
      ['8.8.8.8', '::1'],
    ]) {
      const verdict = await checkDestination('https://hooks.example/x', policy, answering(...answers));
      assert.equal(verdict.ok, false, answers.join(','));
      assert.ok(!verdict.ok && verdict.reason.includes('hooks.example'));
    }
  });

  it('accepts a name that does not resolve now, or not in time (every attempt checks again)', async () => {
    const nxdomain: Resolver = async () => {
      throw Object.assign(new Error('getaddrinfo ENOTFOUND'), { code: 'ENOTFOUND' });
    };
    assert.equal((await checkDestination('https://not-yet.example/', policy, nxdomain)).ok, true);
    assert.equal((await checkDestination('https://empty.example/', policy, answering())).ok, true);
    const silent: Resolver = () => new Promise(() => {});
    const startedAt = performance.now();
    assert.equal((await checkDestination('https://slow.example/', policy, silent, 50)).ok, true);
    assert.ok(performance.now() - startedAt < 2000);
  });

  it('still refuses a bad URL before resolving anything', async () => {
    const resolve: Resolver = () => assert.fail('must not resolve');
    assert.equal((await checkDestination('ftp://example.com/', policy, resolve)).ok, false);
  });
});
