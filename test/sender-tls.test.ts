// TLS through the pinned connection: a CA and certificates made here with the openssl CLI, in
// a temporary directory; HTTPS servers on 127.0.0.1; the name `localhost` resolved by a stub.
// A certificate problem is a known failure: the request never left.

import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { once } from 'node:events';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import https from 'node:https';
import net, { type AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { createSender, type Resolver, type SenderOptions } from '../src/sender/send.ts';

const toLoopback: Resolver = async () => [{ address: '127.0.0.1', family: 4 }];

/** A throwaway CA that issues leaf certificates, backdated or not, through `openssl ca`. */
function makeCa(dir: string) {
  const file = (name: string) => join(dir, name);
  const openssl = (...args: string[]) => execFileSync('openssl', args, { cwd: dir, stdio: 'pipe' });
  writeFileSync(file('index.txt'), '');
  writeFileSync(file('serial'), '1000\n');
  writeFileSync(
    file('ca.cnf'),
    [
      '[ca]',
      'default_ca = test_ca',
      '[test_ca]',
      `database = ${file('index.txt')}`,
      `new_certs_dir = ${dir}`,
      `serial = ${file('serial')}`,
      'default_md = sha256',
      'policy = any_name',
      'unique_subject = no',
      '[any_name]',
      'commonName = supplied',
    ].join('\n'),
  );
  openssl(
    'req',
    '-x509',
    '-newkey',
    'ec',
    '-pkeyopt',
    'ec_paramgen_curve:prime256v1',
    '-nodes',
    '-keyout',
    'ca.key',
    '-out',
    'ca.pem',
    '-subj',
    '/CN=herald test CA',
    '-days',
    '2',
    '-addext',
    'basicConstraints=critical,CA:TRUE',
    '-addext',
    'keyUsage=critical,keyCertSign,cRLSign',
  );

  return {
    caPem: readFileSync(file('ca.pem'), 'utf8'),
    issue(name: string, dnsName: string, validity: string[]): { key: string; cert: string } {
      openssl(
        'req',
        '-new',
        '-newkey',
        'ec',
        '-pkeyopt',
        'ec_paramgen_curve:prime256v1',
        '-nodes',
        '-keyout',
        `${name}.key`,
        '-out',
        `${name}.csr`,
        '-subj',
        `/CN=${dnsName}`,
      );
      writeFileSync(
        file(`${name}.ext`),
        [
          'basicConstraints = CA:FALSE',
          `subjectAltName = DNS:${dnsName}`,
          'keyUsage = digitalSignature',
          'extendedKeyUsage = serverAuth',
          'subjectKeyIdentifier = hash',
          'authorityKeyIdentifier = keyid',
        ].join('\n'),
      );
      openssl(
        'ca',
        '-batch',
        '-notext',
        '-config',
        'ca.cnf',
        '-cert',
        'ca.pem',
        '-keyfile',
        'ca.key',
        '-in',
        `${name}.csr`,
        '-out',
        `${name}.pem`,
        '-extfile',
        `${name}.ext`,
        ...validity,
      );
      return {
        key: readFileSync(file(`${name}.key`), 'utf8'),
        cert: readFileSync(file(`${name}.pem`), 'utf8'),
      };
    },
  };
}

describe('sender over TLS', () => {
  const dir = mkdtempSync(join(tmpdir(), 'herald-tls-'));
  const servers: net.Server[] = [];
  const ports: Record<'valid' | 'wrongName' | 'expired' | 'plain', number> = {
    valid: 0,
    wrongName: 0,
    expired: 0,
    plain: 0,
  };
  let requests = 0;
  let caPem = '';

  async function serve(server: net.Server): Promise<number> {
    servers.push(server);
    server.listen(0, '127.0.0.1');
    await once(server, 'listening');
    return (server.address() as AddressInfo).port;
  }

  function httpsServer(identity: { key: string; cert: string }): https.Server {
    return https.createServer(identity, (_req, res) => {
      requests++;
      res.end('secure');
    });
  }

  before(async () => {
    const ca = makeCa(dir);
    caPem = ca.caPem;
    const inDays = ['-days', '2'];
    ports.valid = await serve(httpsServer(ca.issue('valid', 'localhost', inDays)));
    ports.wrongName = await serve(httpsServer(ca.issue('other', 'other.example', inDays)));
    const lastYear = ['-startdate', '20200101000000Z', '-enddate', '20200201000000Z'];
    ports.expired = await serve(httpsServer(ca.issue('expired', 'localhost', lastYear)));
    // Plain TCP that answers garbage: https to something that does not speak TLS.
    // resume() reads (and drops) the ClientHello, so the client's close is seen and the server can close.
    ports.plain = await serve(
      net.createServer((socket) => socket.resume().end('HTTP/1.1 400 Bad Request\r\n\r\n')),
    );
  });

  after(async () => {
    for (const server of servers) {
      if (server instanceof https.Server) server.closeAllConnections();
      server.close();
    }
    await Promise.all(servers.map((server) => once(server, 'close')));
    rmSync(dir, { recursive: true, force: true });
  });

  function sender(overrides: Partial<SenderOptions> = {}) {
    return createSender({
      allowPrivateNetworks: ['127.0.0.0/8'],
      timeoutMs: 3000,
      resolve: toLoopback,
      extraCaPem: caPem,
      ...overrides,
    });
  }

  it('succeeds with a valid certificate for the URL host, trusted through extraCaPem', async () => {
    requests = 0;
    const s = sender();
    const result = await s.send({ url: `https://localhost:${ports.valid}/hook`, headers: {}, body: '{}' });
    assert.equal(result.outcome, 'success');
    assert.equal(result.responseBody, 'secure');
    assert.equal(requests, 1);
    await s.close();
  });

  const FAILURES: ReadonlyArray<
    [what: string, port: () => number, options: Partial<SenderOptions>, errorCode: string | RegExp]
  > = [
    ['a certificate for another name', () => ports.wrongName, {}, 'ERR_TLS_CERT_ALTNAME_INVALID'],
    ['an expired certificate', () => ports.expired, {}, 'CERT_HAS_EXPIRED'],
    [
      'a CA the sender does not trust (no extraCaPem)',
      () => ports.valid,
      { extraCaPem: undefined },
      'UNABLE_TO_VERIFY_LEAF_SIGNATURE',
    ],
    ['a server that does not speak TLS', () => ports.plain, {}, /^ERR_SSL_/],
  ];
  for (const [what, port, options, errorCode] of FAILURES) {
    it(`fails before sending on ${what}`, async () => {
      requests = 0;
      const s = sender(options);
      const result = await s.send({ url: `https://localhost:${port()}/hook`, headers: {}, body: '{}' });
      assert.equal(result.outcome, 'failure');
      assert.equal(result.responseClass, 'tls_error');
      assert.equal(result.requestSent, false);
      assert.equal(result.statusCode, null);
      assert.match(
        result.errorCode ?? '',
        errorCode instanceof RegExp ? errorCode : new RegExp(`^${errorCode}$`),
      );
      assert.equal(requests, 0);
      await s.close();
    });
  }
});
