// A migration that has been released has run on databases herald no longer controls: the runner
// applies each number once, so an edit to it would never reach them (a change belongs in a new
// migration). Each released file is pinned here by its SHA-256; a new migration is added to the
// list when it is released.

import assert from 'node:assert/strict';
import crypto from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { test } from 'node:test';
import { readMigrations } from '../src/db/migrate.ts';

const RELEASED: Record<number, string> = {
  1: '5cb7e45f5d155e160adcda81bb6daa72ce22d4a54e7f1c49e4e035c73a36f0ed',
  2: '474b9d2b5cfea012e0fab8bc0e372e61c7d09942453bd807b2f1e8cb26bbc870',
  3: 'a9daff6ea965d3544cdfc3c72a47daf108042e6f4ec2137aa53f0c20420a30fa',
  4: 'ede023d13af35745af1d1469cf2618f13a318715f69ea066aa6ccd4c08bd1acd',
  5: '04121988041be9d773da9166aaa7fa8d6839ad6790b16c2eb5708d53ac4760d1',
  6: '537ca048daf95add5349b40d8d5795c563f33ffcc8282a74c10b8f33830f53a9',
  7: 'cc935300224d0dc59891e63107170a87e90c03c3e58c73b69b1dcc6b4b293de0',
  8: 'e3cfe54f47d070fc8fa21565d261e2f61cf83e591f608ef6f0cb711781caf2db',
  9: 'cd878f5f1ed41ed24fd584d49ed214673617383ac59fe2725be512ca93a47eb1',
  10: 'e4d9abbc4c9e2cd0fdfa36a2e7e03052bf5ac9d1c3c987edcab2ff2bd4a9ac15',
  11: '817225f6490e4adf9c4330fa0d23c1d7dbdc558423bc023cb1186dc98cc62df7',
  12: '33b797872324b495b9c072a75a526e2fe0520de39ed0cafec3933219bb411d39',
  13: '1f8e41ffd604d09929ef9c601abcd1f3d26abe637c8b05232253c30e70b015ee',
  14: 'cc32032e17015a357880d07bdb739ab056e29e8ce6457336dc23c423ab1720d9',
  15: '0e04bf5be8aff68d3edc2c24872a4ab5e00595777e1590d06f63d11730087498',
  16: '0a923aa217456bb8e2cc20d400a3f560a6d62bcc17d7f9b2da7a48347e65569c',
  17: '01616981f509d92cc39510be35c33a85ddc6acdbf48d7b1278ffea9c9abfb8c9',
  18: 'e06265324c7449649ccdd8e54e20b5ad1276a973d244a338e320b40b7c7f31c4',
  19: '913db07940adc02617a3ccdf95926f5a42e05eff38f7bc3168b5cb703b4fdc8e',
  20: '50bd0ce4180b193d0abb66b04c1f1f5d1238a323e40c7a05508db4f9d66f8994',
  21: 'eabb2c0bca97b97b84a3f655e929e2d26f021197d4b108d6c56ff3a5772045fa',
  22: 'c5bed1b0576e38c85754d08ed7327920dc1441d346e69df8e412d3276480cd4b',
  23: '1bec51227d3b40a4d3ed4868eac8eb34bc98b183a2d7effc0aa736b1d4c3e5db',
  24: 'cd8a9bc7786049f0fcab05b3bdb260fe3b913c407cf526502789d76d3ffb350a',
  25: '8a6348ab4559ea620a805d7b3a44c6be6f2492a8a2cf1a61949d1dcecf028179',
  26: 'ca84a3fb07105ad99342c088482f9291421104b0429f3adf883edb4bc178646b',
  27: '9b4a6f4ba4bb4ebbc06a1ce9eab53b14a7089ca09a500d89ef656fafc33c6d83',
  28: '29edab40d246fa97e41b110b52c6e792986d393fb3f76b893069cd766d0283d3',
  29: '01b2290c66d1b71ab38c01721f6be590ade4c759d134d04ddb7868924f83a28f',
  30: '5f85e1b0f9a20a40fca0ed8365305dd7be3ddb3d8180babab361637a92022120',
  31: '393461b536ac22c8038052d7df0acb88f6e4a76d5e859630a54814ba1d910cff',
  32: '8b4404b362348646599f041dd791466ba1ea58fc681d44ee580e0b140e5123bc',
  33: 'eeafa76496ff2b846f0d73fab69f04c8b381dd009eaa32cfe9cf0ec67f3da8b8',
  34: '8a7f77964c50f1eec058bc45a948db8562fec727afd4858c1a934d7590b137d7',
  35: '7401e2a6309643aecd3102586eac425741d8e0cf72a1f62fa095d7bd8a99f819',
  36: '31b8a64fd8f61da2eaaad6c1eb05a963ec2b37169bf3fdff88d725ccca5a4b91',
  37: '1ad76411b72361d76ad99803fb14c017ac13cdff2cada64f9a5a3f93da43f3bc',
  38: 'e132d9bc6704693b36eeb02ebb9c6da3a7bd411ea5e2fafc768cc522278b9ff8',
  39: 'd82285f1afcc32776bc4910c694fb46e0e4518881bce0bde00b91e9455f2c148',
  40: 'a013341da7b1d3ad2d0c5029e4c67c637358ec0f8a72b3f09629e54ece426dc8',
  41: 'f5431dc57f40c04c0c08fd473e6c1d2c42cdc9b59206ad4eb03297aa8671b7ef',
  42: '6e998fb768414bb0868ecb028ef7d9b4ac67cf46fb67b47cf94f438216e1afc0',
  43: '74bc32f47963103e9a1054bed4925d33bb2fbbf735f3be91194f67d36a561d67',
  44: 'dc948637d6c62d50b252bdd720d4fa4e804f95c4e863809a5ba251e4384a6579',
  45: '5b47130c6ae693bac189914bd884a6ea78aa8107ae5512d386d7c41b24e76e5a',
  46: '4b4039d6a4890ba0b9f1f2fbdda99e842918b5bdeff182f56a44032e8c130d4e',
};

test('released migrations are never edited', () => {
  const byVersion = new Map(readMigrations().map((m) => [m.version, m]));
  for (const [version, digest] of Object.entries(RELEASED)) {
    const migration = byVersion.get(Number(version));
    assert.ok(migration, `migration ${version} is still there`);
    const actual = crypto.createHash('sha256').update(migration.sql).digest('hex');
    assert.equal(actual, digest, `migration ${version} (${migration.name}) changed after its release`);
  }
});

test('a migration named otherwise, a number twice or one skipped is refused when the files are read', () => {
  const dirWith = (files: string[]) => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'herald-migrations-'));
    for (const file of files) fs.writeFileSync(path.join(dir, file), 'select 1;');
    return dir;
  };
  const cases: [string[], RegExp][] = [
    [['0001_core.sql', '0002-add-thing.sql'], /0002-add-thing\.sql: expected a name like/],
    [['0001_core.sql', '0002_a.sql', '0002_b.sql'], /0002_b\.sql: expected number 0003/],
    [['0001_core.sql', '0003_later.sql'], /0003_later\.sql: expected number 0002/],
  ];
  for (const [files, refusal] of cases) {
    const dir = dirWith(files);
    try {
      assert.throws(() => readMigrations(dir), refusal, files.join(', '));
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  }
  const fine = dirWith(['0001_core.sql', '0002_next.sql', 'README.txt']);
  try {
    assert.deepEqual(
      readMigrations(fine).map((m) => `${m.version}_${m.name}`),
      ['1_core', '2_next'],
    );
  } finally {
    fs.rmSync(fine, { recursive: true, force: true });
  }
});
