-- Inbound intake: sources that push signed requests to herald, the claim of each delivery id
-- (unique per source), and every receipt of it, duplicates included. Content is not kept here:
-- only ids, digests, timestamps and the message each claim produced.

create table source (
  id            text primary key default herald_id('src'),
  uid           text unique,
  -- Verification scheme and its settings (never secrets: those are sealed in source_secret).
  scheme        text not null,
  settings      jsonb not null default '{}',
  app_id        text not null references app (id) on delete cascade,
  event_type    text not null,
  -- Template of the business key over the delivery: '{{delivery_id}}', '{{body.ticket.id}}:{{body.action}}'.
  business_key  text not null default '{{delivery_id}}',
  -- Days the relayed payload is kept; null → the message default.
  retention_days int,
  created_at    timestamptz not null default now(),
  updated_at    timestamptz not null default now(),
  constraint source_scheme_known check (scheme in
    ('standard-webhooks', 'stripe', 'github', 'slack', 'shopify', 'hmac', 'gcp-pubsub', 'aws-sns'))
);

-- Sealed like endpoint secrets (the source id is the additional data). Several may be live — a
-- provider may sign with more than one, and a rotation keeps the old ones for an overlap — and any
-- of them verifies. expires_at null: no expiry.
create table source_secret (
  id         bigint generated always as identity primary key,
  source_id  text not null references source (id) on delete cascade,
  sealed     bytea not null,
  created_at timestamptz not null default now(),
  expires_at timestamptz
);
create index source_secret_source_idx on source_secret (source_id);

create table intake (
  id           text primary key default herald_id('in'),
  source_id    text not null references source (id) on delete cascade,
  app_id       text not null,
  delivery_id  text not null,
  business_key text not null,
  body_sha256  bytea not null,
  message_id   text references message (id) on delete set null,
  claimed_at   timestamptz not null default now(),
  unique (source_id, delivery_id)
);
create index intake_message_idx on intake (message_id);

create table intake_observation (
  id          bigint generated always as identity primary key,
  intake_id   text not null references intake (id) on delete cascade,
  app_id      text not null,
  observed_at timestamptz not null default now(),
  duplicate   boolean not null,
  -- A redelivery whose bytes differ from the first is worth seeing: same id, other content.
  body_sha256 bytea not null
);
create index intake_observation_intake_idx on intake_observation (intake_id, id);
