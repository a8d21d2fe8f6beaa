// Throwaway certificates for tests, made with the openssl CLI (a real X.509 certificate, as a
// receiver or a provider's key server presents one).

import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';

/**
 * A self-signed P-256 certificate for `subject` (`/CN=localhost`), valid two days, with
 * `subjectAltName` when given (`DNS:localhost,IP:127.0.0.1`): written to `dir` as `key.pem` and
 * `cert.pem`, and the certificate's PEM.
 */
export function selfSignedCertificate(
  dir: string,
  subject: string,
  subjectAltName?: string,
): { keyFile: string; certFile: string; pem: string } {
  const keyFile = join(dir, 'key.pem');
  const certFile = join(dir, 'cert.pem');
  const altNames = subjectAltName ? ['-addext', `subjectAltName=${subjectAltName}`] : [];
  execFileSync(
    'openssl',
    ['req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:P-256', '-nodes'].concat([
      '-keyout',
      keyFile,
      '-out',
      certFile,
      '-subj',
      subject,
      '-days',
      '2',
      ...altNames,
    ]),
    { stdio: 'pipe' },
  );
  return { keyFile, certFile, pem: readFileSync(certFile, 'utf8') };
}
