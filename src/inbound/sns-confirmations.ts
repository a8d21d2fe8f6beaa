// The SNS subscription confirmations a source kept for its operator (confirmSubscriptions off):
// for each topic, the `aws sns confirm-subscription` command that confirms it, with
// AuthenticateOnUnsubscribe — which herald's own visit to the SubscribeURL cannot set, so that
// only the topic's owner can end the subscription, not whoever reads a relayed UnsubscribeURL.

import type { SecretBox } from '../crypto/secret-box.ts';
import type { Queryable } from '../db/port.ts';
import { type SourceRow, subscriptionTokens } from '../db/sources.ts';

export interface KeptConfirmation {
  topicArn: string;
  receivedAt: Date;
  /** The command that confirms the subscription; the token in it is valid for three days. */
  command: string;
}

/** A value as one word of a POSIX shell command line. */
function shellWord(value: string): string {
  return /^[A-Za-z0-9_:./=@%+-]+$/.test(value) ? value : `'${value.replaceAll("'", `'\\''`)}'`;
}

export async function keptConfirmations(
  db: Queryable,
  box: SecretBox,
  source: SourceRow,
): Promise<KeptConfirmation[]> {
  return (await subscriptionTokens(db, source.id)).map(({ topicArn, sealed, receivedAt }) => {
    // arn:aws:sns:<region>:<account>:<topic>: the CLI must call the topic's region.
    const region = topicArn.split(':')[3];
    const words = ['aws', 'sns', 'confirm-subscription'];
    if (region) words.push('--region', region);
    words.push(
      '--topic-arn',
      topicArn,
      '--token',
      box.open(sealed, source.id),
      '--authenticate-on-unsubscribe',
      'true',
    );
    return { topicArn, receivedAt, command: words.map(shellWord).join(' ') };
  });
}
