// Request schemas of herald's inbound source API (/api/v1/source).

import { z } from 'zod';
import { ID_PREFIX, ident, uidBeside } from './svix.ts';
import { storable, text, UNSTORABLE_REFUSED } from './text.ts';

const secret = text().min(8).max(4096);

export const SourceIn = z.object({
  uid: uidBeside(ID_PREFIX.source).nullish(),
  scheme: z.enum([
    'standard-webhooks',
    'stripe',
    'github',
    'slack',
    'shopify',
    'hmac',
    'gcp-pubsub',
    'aws-sns',
  ]),
  /** Scheme settings (see the README); validated per scheme. */
  settings: z.record(z.string(), z.unknown()).refine(storable, UNSTORABLE_REFUSED).optional(),
  /** One secret, or several that all verify (a provider's rotation overlap). */
  secret: z.union([secret, z.array(secret).min(1).max(5)]).nullish(),
  app: text().min(1).max(256),
  eventType: ident(256),
  businessKey: text().min(1).max(512).optional(),
  retentionDays: z.number().int().min(1).max(90).nullish(),
});
export type SourceIn = z.infer<typeof SourceIn>;

export const SourcePatch = SourceIn.partial()
  .extend({
    /** Seconds the replaced secret keeps verifying after a new `secret` is set (default 24 h). */
    secretOverlapSeconds: z
      .number()
      .int()
      .min(0)
      .max(7 * 24 * 3600)
      .optional(),
  })
  // Alone it would change nothing: a caller ending an overlap after a leak must not read a 200
  // as the old secrets revoked. They end with a rotation to a new secret and 0.
  .refine((patch) => patch.secretOverlapSeconds === undefined || (patch.secret ?? null) !== null, {
    path: ['secretOverlapSeconds'],
    message: 'only with a new secret: it is how long the secrets it replaces keep verifying',
  });
export type SourcePatch = z.infer<typeof SourcePatch>;
