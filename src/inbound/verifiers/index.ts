// The inbound verification layer: a source's stored scheme settings + its live secrets → a
// Verifier for the raw requests of that source. Build a verifier once per source (and secret set)
// and keep it: the JWKS and certificate caches live inside it.

import { z } from 'zod';
import { AwsSnsSettings, createAwsSnsVerifier, createSnsCertificates } from './aws-sns.ts';
import { createGcpPubSubVerifier, GcpPubSubSettings } from './gcp-pubsub.ts';
import { createGitHubVerifier, GitHubSettings } from './github.ts';
import { createHmacVerifier, HmacSettings } from './hmac.ts';
import { createShopifyVerifier, ShopifySettings } from './shopify.ts';
import { createSlackVerifier, SlackSettings } from './slack.ts';
import { createStandardWebhooksVerifier, StandardWebhooksSettings } from './standard-webhooks.ts';
import { createStripeVerifier, StripeSettings } from './stripe.ts';
import type { FetchText, Verifier, VerifierDeps } from './types.ts';

export { createSnsCertificates, isSnsUrl, type SnsCertificates } from './aws-sns.ts';
export {
  createSafeFetchText,
  FetchTextError,
  type SafeFetchText,
  type SafeFetchTextOptions,
} from './fetch-text.ts';
export { URL_VERIFICATION } from './slack.ts';
export type { FetchText, InboundRequest, RejectionCode, Verdict, Verifier, VerifierDeps } from './types.ts';

export const SchemeConfig = z.discriminatedUnion('scheme', [
  StandardWebhooksSettings,
  StripeSettings,
  GitHubSettings,
  SlackSettings,
  ShopifySettings,
  HmacSettings,
  GcpPubSubSettings,
  AwsSnsSettings,
]);
/** The validated settings (defaults applied); what createVerifier takes. */
export type SchemeConfig = z.output<typeof SchemeConfig>;
/** What an operator or API client may send (defaults optional). */
export type SchemeConfigInput = z.input<typeof SchemeConfig>;
export type Scheme = SchemeConfig['scheme'];

function needFetchText(scheme: Scheme, deps: VerifierDeps): FetchText {
  if (deps.fetchText === undefined) throw new Error(`${scheme} verification needs deps.fetchText`);
  return deps.fetchText;
}

/**
 * Throws (at build time, never at verify time) when the settings are invalid, when an HMAC scheme
 * has no usable secret, or when a scheme that fetches keys has no fetchText. Error messages
 * never contain a secret.
 */
export function createVerifier(
  config: SchemeConfigInput,
  secrets: readonly string[],
  deps: VerifierDeps,
): Verifier {
  // Parsed again here so a config built in code gets the same checks and defaults as a stored one.
  const settings = SchemeConfig.parse(config);
  switch (settings.scheme) {
    case 'standard-webhooks':
      return createStandardWebhooksVerifier(secrets);
    case 'stripe':
      return createStripeVerifier(secrets);
    case 'github':
      return createGitHubVerifier(secrets);
    case 'slack':
      return createSlackVerifier(settings, secrets);
    case 'shopify':
      return createShopifyVerifier(secrets);
    case 'hmac':
      return createHmacVerifier(settings, secrets);
    case 'gcp-pubsub':
      return createGcpPubSubVerifier(settings, needFetchText(settings.scheme, deps));
    case 'aws-sns':
      return createAwsSnsVerifier(
        settings,
        deps.snsCertificates ?? createSnsCertificates(needFetchText(settings.scheme, deps)),
      );
  }
}
