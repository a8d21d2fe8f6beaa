import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { describe, test } from 'node:test';
import { apiKeyMatches, generateApiKey, hashApiKey, parseApiKeyPrefix } from '../src/crypto/api-key-token.ts';
import { createSecretBox, keyIdOf, parseMasterKey } from '../src/crypto/secret-box.ts';

const SECRET = 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw';
const ENDPOINT_ID = 'ep_2mVhC8sbl4xZ1Bq3Nn9gGg0Yk1';

function newKey(): Buffer {
  return randomBytes(32);
}

function assertOpenFails(open: () => unknown, message: RegExp): void {
  assert.throws(open, (error: Error) => {
    assert.match(error.message, message);
    assert.ok(!error.message.includes(SECRET), 'the error message leaks the plaintext');
    return true;
  });
}

describe('secret box', () => {
  test('round-trips a secret under the same additional data', () => {
    const box = createSecretBox([newKey()]);
    const plaintext = `${SECRET} ünïcödé ✓`;
    assert.equal(box.open(box.seal(plaintext, ENDPOINT_ID), ENDPOINT_ID), plaintext);
    assert.equal(box.open(box.seal('', ENDPOINT_ID), ENDPOINT_ID), '');
  });

  test('lays out version, key id, IV, tag and ciphertext', () => {
    const box = createSecretBox([newKey()]);
    const sealed = box.seal(SECRET, ENDPOINT_ID);
    assert.equal(sealed[0], 1);
    assert.equal(sealed.toString('ascii', 1, 9), box.currentKeyId);
    assert.equal(sealed.length, 1 + 8 + 12 + 16 + Buffer.byteLength(SECRET));
    assert.ok(!sealed.includes(Buffer.from(SECRET)));
  });

  test('uses a fresh IV for every seal', () => {
    const box = createSecretBox([newKey()]);
    assert.notDeepEqual(box.seal(SECRET, ENDPOINT_ID), box.seal(SECRET, ENDPOINT_ID));
  });

  test('does not open under another row id', () => {
    const box = createSecretBox([newKey()]);
    const sealed = box.seal(SECRET, ENDPOINT_ID);
    assertOpenFails(() => box.open(sealed, 'ep_someoneElse'), /tampered with or belongs to another row/);
    assertOpenFails(() => box.open(sealed, ''), /tampered with or belongs to another row/);
  });

  test('does not open when any bit of the envelope is flipped', () => {
    const box = createSecretBox([newKey()]);
    const sealed = box.seal(SECRET, ENDPOINT_ID);
    for (let index = 0; index < sealed.length; index++) {
      for (const bit of [0x01, 0x80]) {
        const tampered = Buffer.from(sealed);
        tampered[index]! ^= bit;
        assertOpenFails(() => box.open(tampered, ENDPOINT_ID), /^cannot open secret/);
      }
    }
  });

  test('does not open a truncated or extended envelope', () => {
    const box = createSecretBox([newKey()]);
    const sealed = box.seal(SECRET, ENDPOINT_ID);
    assertOpenFails(() => box.open(sealed.subarray(0, sealed.length - 1), ENDPOINT_ID), /tampered/);
    assertOpenFails(() => box.open(Buffer.concat([sealed, Buffer.of(0)]), ENDPOINT_ID), /tampered/);
    assertOpenFails(() => box.open(sealed.subarray(0, 36), ENDPOINT_ID), /shorter than any sealed value/);
    assertOpenFails(() => box.open(Buffer.alloc(0), ENDPOINT_ID), /shorter than any sealed value/);
  });

  test('names an unsupported version', () => {
    const box = createSecretBox([newKey()]);
    const sealed = box.seal(SECRET, ENDPOINT_ID);
    sealed[0] = 2;
    assertOpenFails(() => box.open(sealed, ENDPOINT_ID), /unsupported envelope version 2/);
    assert.throws(() => box.keyIdOf(sealed), /unsupported envelope version 2/);
  });

  test('does not open a value sealed under a key it does not hold', () => {
    const sealed = createSecretBox([newKey()]).seal(SECRET, ENDPOINT_ID);
    const other = createSecretBox([newKey(), newKey()]);
    assertOpenFails(() => other.open(sealed, ENDPOINT_ID), /unknown key id/);
  });

  test('opens values under a previous key listed second, and reports which key sealed them', () => {
    const oldKey = newKey();
    const newMasterKey = newKey();
    const sealedUnderOld = createSecretBox([oldKey]).seal(SECRET, ENDPOINT_ID);

    const rotating = createSecretBox([newMasterKey, oldKey]);
    assert.equal(rotating.currentKeyId, keyIdOf(newMasterKey));
    assert.equal(rotating.keyIdOf(sealedUnderOld), keyIdOf(oldKey));
    assert.notEqual(rotating.keyIdOf(sealedUnderOld), rotating.currentKeyId);
    assert.equal(rotating.open(sealedUnderOld, ENDPOINT_ID), SECRET);

    const reSealed = rotating.seal(rotating.open(sealedUnderOld, ENDPOINT_ID), ENDPOINT_ID);
    assert.equal(rotating.keyIdOf(reSealed), rotating.currentKeyId);
    assert.equal(createSecretBox([newMasterKey]).open(reSealed, ENDPOINT_ID), SECRET);
    assertOpenFails(() => createSecretBox([oldKey]).open(reSealed, ENDPOINT_ID), /unknown key id/);
  });

  test('rejects keys that are not exactly 32 bytes, wherever they are listed', () => {
    assert.throws(() => createSecretBox([randomBytes(31)]), /exactly 32 bytes, got 31/);
    assert.throws(() => createSecretBox([randomBytes(33)]), /exactly 32 bytes, got 33/);
    assert.throws(() => createSecretBox([newKey(), randomBytes(31)]), /exactly 32 bytes, got 31/);
    assert.throws(() => createSecretBox([]), /at least one key/);
  });

  test('accepts the same key listed twice', () => {
    const key = newKey();
    const box = createSecretBox([key, Buffer.from(key)]);
    assert.equal(box.open(box.seal(SECRET, ENDPOINT_ID), ENDPOINT_ID), SECRET);
  });
});

describe('keyIdOf', () => {
  test('is the first 8 hex chars of SHA-256 of the key', () => {
    assert.equal(keyIdOf(Buffer.alloc(32)), '66687aad');
    assert.match(keyIdOf(newKey()), /^[0-9a-f]{8}$/);
  });
});

describe('parseMasterKey', () => {
  test('decodes base64 of exactly 32 bytes', () => {
    const key = newKey();
    assert.deepEqual(parseMasterKey(key.toString('base64')), key);
    assert.deepEqual(parseMasterKey(`${key.toString('base64')}\n`), key);
  });

  test('rejects anything else without echoing it', () => {
    for (const bad of [
      '',
      randomBytes(31).toString('base64'),
      randomBytes(33).toString('base64'),
      newKey().toString('base64url'),
    ]) {
      assert.throws(() => parseMasterKey(bad), {
        message: 'invalid master key: expected 32 bytes of base64',
      });
    }
  });
});

describe('api key tokens', () => {
  test('have the form hk_<8 hex>_<43 base64url> and no dot', () => {
    const { token, prefix } = generateApiKey();
    assert.match(token, /^hk_[0-9a-f]{8}_[A-Za-z0-9_-]{43}$/);
    assert.ok(!token.includes('.'));
    assert.equal(token.slice(3, 11), prefix);
  });

  test('the prefix parses back, and only from herald tokens', () => {
    const { token, prefix } = generateApiKey();
    assert.equal(parseApiKeyPrefix(token), prefix);
    for (const foreign of [
      '',
      'hk_',
      token.slice(0, -1),
      `${token}A`,
      token.toUpperCase(),
      `${token}.eu`,
      token.replace('hk_', 'sk_'),
      `hk_${prefix}.${token.slice(12)}`,
      'testsk_abcdefghijklmnopqrstuvwxyz0123456789ABCDEFG.us',
    ]) {
      assert.equal(parseApiKeyPrefix(foreign), null, foreign);
    }
  });

  test('the stored hash is SHA-256 of the whole token, and the token matches it', () => {
    const { token, hash } = generateApiKey();
    assert.equal(hash.length, 32);
    assert.deepEqual(hashApiKey(token), hash);
    assert.ok(apiKeyMatches(token, hash));
  });

  test('a token changed in any character does not match', () => {
    const { token, hash } = generateApiKey();
    for (let index = 0; index < token.length; index++) {
      const tampered = token.slice(0, index) + (token[index] === 'a' ? 'b' : 'a') + token.slice(index + 1);
      assert.ok(!apiKeyMatches(tampered, hash), tampered);
    }
    assert.ok(!apiKeyMatches(generateApiKey().token, hash));
  });

  test('a stored hash of the wrong length does not match instead of throwing', () => {
    const { token, hash } = generateApiKey();
    assert.ok(!apiKeyMatches(token, hash.subarray(0, 31)));
    assert.ok(!apiKeyMatches(token, Buffer.alloc(0)));
  });

  test('tokens and hashes are unique across 1000 generations', () => {
    const keys = Array.from({ length: 1000 }, generateApiKey);
    assert.equal(new Set(keys.map((key) => key.token)).size, 1000);
    assert.equal(new Set(keys.map((key) => key.hash.toString('hex'))).size, 1000);
  });
});
