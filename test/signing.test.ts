import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { describe, test } from 'node:test';
import { Webhook as StandardWebhook } from 'standardwebhooks';
import { Webhook as SvixWebhook } from 'svix';
import {
  decodeEndpointSecret,
  generateEndpointSecret,
  isValidEndpointSecret,
  signPayload,
  verifySignature,
} from '../src/signing/standard-webhooks.ts';

interface SignedMessage {
  secret: string;
  msgId: string;
  timestamp: string;
  body: string;
  signature: string;
}

function freshMessage(secrets: readonly string[] = [generateEndpointSecret()]): SignedMessage {
  const msgId = 'msg_2mVhC8sbl4xZ1Bq3Nn9gGg0Yk1';
  const timestampSeconds = Math.floor(Date.now() / 1000);
  const body = JSON.stringify({ type: 'invoice.paid', data: { id: 'in_123', amount: 4200 } });
  const signature = signPayload({
    msgId,
    timestampSeconds,
    body,
    keys: secrets.map(decodeEndpointSecret),
  });
  return { secret: secrets[0]!, msgId, timestamp: String(timestampSeconds), body, signature };
}

function acceptedBy(message: SignedMessage): Record<string, boolean> {
  const { secret, msgId, timestamp, body, signature } = message;
  const unbranded = { 'webhook-id': msgId, 'webhook-timestamp': timestamp, 'webhook-signature': signature };
  const branded = { 'svix-id': msgId, 'svix-timestamp': timestamp, 'svix-signature': signature };
  const withoutPrefix = secret.replace(/^whsec_/, '');
  return {
    standardwebhooks: accepts(() => new StandardWebhook(withoutPrefix).verify(body, unbranded)),
    'svix (svix-* headers)': accepts(() => new SvixWebhook(secret).verify(body, branded)),
    'svix (webhook-* headers)': accepts(() => new SvixWebhook(secret).verify(body, unbranded)),
    herald: verifySignature({
      msgId,
      timestampSeconds: Number(timestamp),
      body,
      signatureHeader: signature,
      keys: [decodeEndpointSecret(secret)],
    }),
  };
}

function accepts(verify: () => unknown): boolean {
  try {
    verify();
    return true;
  } catch {
    return false;
  }
}

const everywhere = {
  standardwebhooks: true,
  'svix (svix-* headers)': true,
  'svix (webhook-* headers)': true,
  herald: true,
};
const nowhere = {
  standardwebhooks: false,
  'svix (svix-* headers)': false,
  'svix (webhook-* headers)': false,
  herald: false,
};

function withCharReplaced(text: string, index: number): string {
  const replacement = text[index] === 'A' ? 'B' : 'A';
  return text.slice(0, index) + replacement + text.slice(index + 1);
}

describe('endpoint secrets', () => {
  test('a generated secret is whsec_ + base64 of 24 random bytes', () => {
    const secret = generateEndpointSecret();
    assert.match(secret, /^whsec_[A-Za-z0-9+/]{32}$/);
    assert.equal(decodeEndpointSecret(secret).length, 24);
    assert.ok(isValidEndpointSecret(secret));
    assert.notEqual(generateEndpointSecret(), secret);
  });

  test('decoding accepts the secret with or without its prefix', () => {
    const secret = generateEndpointSecret();
    assert.deepEqual(decodeEndpointSecret(secret), decodeEndpointSecret(secret.slice('whsec_'.length)));
  });

  test('decoding rejects text that is not standard base64', () => {
    for (const bad of ['', 'whsec_', 'whsec_!!!!', 'whsec_abc', 'whsec_a-b_c-d_', 'whsec_ YWJjZA==']) {
      assert.throws(() => decodeEndpointSecret(bad), /invalid endpoint secret/, JSON.stringify(bad));
    }
  });

  test('validity follows Svix: 32..100 base64 chars decoding to 24..75 bytes', () => {
    const ofBytes = (n: number) => randomBytes(n).toString('base64');
    assert.ok(isValidEndpointSecret(ofBytes(24)));
    assert.ok(isValidEndpointSecret(`whsec_${ofBytes(64)}`));
    // 75 bytes are the contract's 100 base64 characters: a custom secret imported from Svix.
    assert.ok(isValidEndpointSecret(`whsec_${ofBytes(75)}`));
    assert.ok(!isValidEndpointSecret(`whsec_${ofBytes(23)}`));
    assert.ok(!isValidEndpointSecret(`whsec_${ofBytes(76)}`));
    assert.ok(!isValidEndpointSecret(`whsec_${ofBytes(24).replace(/.$/, '-')}`));
    assert.ok(!isValidEndpointSecret(`whsk_${ofBytes(24)}`));
  });
});

describe('signPayload', () => {
  test('matches the Standard Webhooks reference vector', () => {
    const signature = signPayload({
      msgId: 'msg_p5jXN8AQM9LWM0D4loKWxJek',
      timestampSeconds: 1614265330,
      body: '{"test": 2432232314}',
      keys: [decodeEndpointSecret('whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw')],
    });
    assert.equal(signature, 'v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=');
  });

  test('its signatures verify with standardwebhooks, svix and verifySignature', () => {
    assert.deepEqual(acceptedBy(freshMessage()), everywhere);
  });

  test('a 64-byte secret signs just as well', () => {
    assert.deepEqual(acceptedBy(freshMessage([`whsec_${randomBytes(64).toString('base64')}`])), everywhere);
  });

  test('refuses to sign without a key', () => {
    assert.throws(() => signPayload({ msgId: 'msg_1', timestampSeconds: 1, body: '{}', keys: [] }));
  });

  test('refuses a timestamp that receivers could not parse as whole seconds', () => {
    const keys = [decodeEndpointSecret(generateEndpointSecret())];
    for (const timestampSeconds of [1.5, Number.NaN, -1]) {
      assert.throws(() => signPayload({ msgId: 'msg_1', timestampSeconds, body: '{}', keys }), TypeError);
    }
  });
});

describe('a single changed byte fails verification everywhere', () => {
  const fields = ['body', 'msgId', 'timestamp', 'signature'] as const;
  for (const field of fields) {
    test(`in the ${field}`, () => {
      const message = freshMessage();
      for (let index = 0; index < message[field].length; index++) {
        const tampered = { ...message, [field]: withCharReplaced(message[field], index) };
        assert.deepEqual(acceptedBy(tampered), nowhere, `${field} changed at ${index}: ${tampered[field]}`);
      }
    });
  }
});

describe('several live secrets (rotation)', () => {
  test('two keys give two space-separated signatures, and either secret alone verifies', () => {
    const [oldSecret, newSecret] = [generateEndpointSecret(), generateEndpointSecret()];
    const signed = freshMessage([oldSecret, newSecret]);
    assert.match(signed.signature, /^v1,[A-Za-z0-9+/]{43}= v1,[A-Za-z0-9+/]{43}=$/);
    assert.deepEqual(acceptedBy({ ...signed, secret: oldSecret }), everywhere);
    assert.deepEqual(acceptedBy({ ...signed, secret: newSecret }), everywhere);
    assert.deepEqual(acceptedBy({ ...signed, secret: generateEndpointSecret() }), nowhere);
  });

  test('verifySignature accepts when any of its keys matches', () => {
    const signed = freshMessage();
    const keys = [decodeEndpointSecret(generateEndpointSecret()), decodeEndpointSecret(signed.secret)];
    const { msgId, body, signature: signatureHeader } = signed;
    assert.ok(
      verifySignature({ msgId, timestampSeconds: Number(signed.timestamp), body, signatureHeader, keys }),
    );
  });
});

describe('verifySignature', () => {
  const signed = freshMessage();
  const base = {
    msgId: signed.msgId,
    timestampSeconds: Number(signed.timestamp),
    body: signed.body,
    keys: [decodeEndpointSecret(signed.secret)],
  };
  const signatureBytes = signed.signature.slice('v1,'.length);

  test('skips unknown versions and still finds the v1 signature', () => {
    const signatureHeader = `v1a,${randomBytes(64).toString('base64')} v2,${signatureBytes} ${signed.signature}`;
    assert.ok(verifySignature({ ...base, signatureHeader }));
  });

  test('finds the signature in the first of two webhook-signature headers, joined by ", "', () => {
    const other = `v1,${randomBytes(32).toString('base64')}`;
    assert.ok(verifySignature({ ...base, signatureHeader: `${signed.signature}, ${other}` }));
    assert.ok(verifySignature({ ...base, signatureHeader: `${other}, ${signed.signature}` }));
  });

  test('does not accept a valid signature under another version', () => {
    assert.ok(!verifySignature({ ...base, signatureHeader: `v2,${signatureBytes}` }));
    assert.ok(!verifySignature({ ...base, signatureHeader: signatureBytes }));
  });

  test('rejects empty, truncated and padded signatures', () => {
    for (const signatureHeader of [
      '',
      ' ',
      'v1,',
      signed.signature.slice(0, -4),
      `${signed.signature}AAAA`,
      `${signed.signature.slice(0, -1)}!`,
    ]) {
      assert.ok(!verifySignature({ ...base, signatureHeader }), JSON.stringify(signatureHeader));
    }
  });

  test('verifies the raw body bytes as a Buffer', () => {
    const signatureHeader = signed.signature;
    assert.ok(verifySignature({ ...base, body: Buffer.from(signed.body, 'utf8'), signatureHeader }));
    assert.ok(!verifySignature({ ...base, body: Buffer.from(`${signed.body} `, 'utf8'), signatureHeader }));
  });

  test('treats a timestamp that is not whole seconds as a failed verification', () => {
    for (const timestampSeconds of [base.timestampSeconds + 0.5, Number.NaN, -1]) {
      assert.ok(!verifySignature({ ...base, timestampSeconds, signatureHeader: signed.signature }));
    }
  });

  test('fails with no keys', () => {
    assert.ok(!verifySignature({ ...base, keys: [], signatureHeader: signed.signature }));
  });
});
