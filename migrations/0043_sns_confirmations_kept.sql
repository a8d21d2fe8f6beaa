-- An SNS subscription confirmation that its source does not confirm itself (confirmSubscriptions
-- off, the default, so that the operator can confirm it with AuthenticateOnUnsubscribe): kept for
-- the operator, whose `aws sns confirm-subscription` needs its token. herald answered it and
-- threw the token away, and SNS does not send a confirmation that was answered again: the
-- subscription stayed pending. One per topic of a source, the latest; the token is sealed under
-- the master key, bound to its source, as the source's secrets are.
create table source_subscription_token (
  id          bigint generated always as identity primary key,
  source_id   text collate "C" not null references source (id) on delete cascade,
  topic_arn   text collate "C" not null,
  sealed      bytea not null,
  received_at timestamptz not null default now(),
  constraint source_subscription_token_topic_key unique (source_id, topic_arn)
);
