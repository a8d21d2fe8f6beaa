-- herald's core schema: tenants, event types, endpoints and their secrets, messages, deliveries,
-- attempts, API keys and the audit log. Every hot table carries app_id so that the schema can be
-- distributed by app_id (Citus) without a rewrite.

-- Time-ordered identifiers: `<prefix>_` + 12 hex digits of milliseconds since the epoch + 16 random
-- hex digits. Sorting by id sorts by creation time, which is what list pagination relies on.
create function herald_id(prefix text) returns text
language sql volatile as $$
  select prefix || '_' || lpad(to_hex((extract(epoch from clock_timestamp()) * 1000)::bigint), 12, '0')
         || substr(md5(random()::text || clock_timestamp()::text), 1, 16)
$$;

create table app (
  id            text primary key default herald_id('app'),
  uid           text unique,
  name          text not null,
  throttle_rate int,
  metadata      jsonb not null default '{}',
  -- Days message payloads are kept when the publisher does not say (null → 90, Svix's default).
  retention_days int,
  created_at    timestamptz not null default now(),
  updated_at    timestamptz not null default now()
);

create table event_type (
  name         text primary key,
  description  text not null,
  schemas      jsonb,
  archived     boolean not null default false,
  deprecated   boolean not null default false,
  feature_flag text,
  created_at   timestamptz not null default now(),
  updated_at   timestamptz not null default now()
);

create table endpoint (
  id                   text primary key default herald_id('ep'),
  app_id               text not null references app (id) on delete cascade,
  uid                  text,
  url                  text not null,
  description          text not null default '',
  version              int not null default 1,
  throttle_rate        int,
  filter_types         text[],
  channels             text[],
  headers              jsonb not null default '{}',
  metadata             jsonb not null default '{}',
  disabled             boolean not null default false,
  -- Why the endpoint is disabled: by an operator, after consecutive known failures, or a 410 Gone.
  disabled_reason      text,
  consecutive_failures int not null default 0,
  -- The receiver's idempotency contract: it applies a repeated webhook-id / Idempotency-Key once.
  -- When true, an attempt with an unknown outcome is retried; when false it is parked (failed)
  -- for review, since a retry could apply the effect twice.
  idempotent           boolean not null default true,
  -- 'retry': a 4xx follows the retry schedule; 'dead-letter': a validation-type 4xx fails the
  -- delivery at once for review, since resending the same request cannot succeed.
  client_error_policy  text not null default 'retry',
  -- Set when the receiver answered 401/403 (its credentials need attention); cleared by a success.
  credentials_rejected_at timestamptz,
  -- Bumped on every rotation so workers know when their cached signing keys are stale.
  secret_version       int not null default 1,
  created_at           timestamptz not null default now(),
  updated_at           timestamptz not null default now(),
  unique (app_id, uid),
  constraint endpoint_disabled_reason check ((disabled) = (disabled_reason is not null)),
  constraint endpoint_disabled_reason_known check (disabled_reason in ('operator', 'failures', 'gone')),
  constraint endpoint_client_error_policy_known check (client_error_policy in ('retry', 'dead-letter'))
);
create index endpoint_app_idx on endpoint (app_id, id);

-- Signing secrets, sealed with AES-256-GCM (the endpoint id is the additional data). The current
-- secret has expires_at null; a rotated-out secret keeps signing until its expires_at.
create table endpoint_secret (
  id          bigint generated always as identity primary key,
  app_id      text not null,
  endpoint_id text not null references endpoint (id) on delete cascade,
  sealed      bytea not null,
  created_at  timestamptz not null default now(),
  expires_at  timestamptz
);
create unique index endpoint_secret_current on endpoint_secret (endpoint_id) where expires_at is null;

create table message (
  id                 text primary key default herald_id('msg'),
  app_id             text not null references app (id) on delete cascade,
  event_type         text not null,
  event_id           text,
  -- The JSON text exactly as it is signed and sent; null once the retention period has passed.
  payload            text,
  channels           text[],
  tags               text[],
  idempotency_key    text,
  -- SHA-256 of the request content, to tell a replayed publish from a conflicting one.
  request_hash       bytea,
  -- For a message relayed from an inbound delivery: the business key that every outbound attempt
  -- of every cycle carries as Idempotency-Key.
  business_key       text,
  payload_expires_at timestamptz not null,
  created_at         timestamptz not null default now(),
  unique (app_id, idempotency_key)
);
create index message_app_idx on message (app_id, id);

-- One message × one endpoint, snapshotted at publish time (Svix: "message destination").
create table delivery (
  id                    text primary key default herald_id('dlv'),
  app_id                text not null,
  message_id            text not null references message (id) on delete cascade,
  endpoint_id           text not null references endpoint (id) on delete cascade,
  state                 text not null default 'pending',
  cycle                 int not null default 1,
  attempts_in_cycle     int not null default 0,
  attempts_total        int not null default 0,
  next_attempt_at       timestamptz,
  -- The fencing token of the current lease: every write that ends a lease must match it.
  lease_token           uuid,
  lease_expires_at      timestamptz,
  -- How the next attempt was asked for: 'scheduled' or 'manual' (resend, recover).
  trigger               text not null default 'scheduled',
  created_at            timestamptz not null default now(),
  updated_at            timestamptz not null default now(),
  unique (message_id, endpoint_id),
  constraint delivery_state_known check (state in ('pending', 'sending', 'succeeded', 'failed')),
  constraint delivery_trigger_known check (trigger in ('scheduled', 'manual')),
  -- A lease exists exactly while the delivery is sending.
  constraint delivery_lease_iff_sending check (
    (state = 'sending') = (lease_token is not null) and (lease_token is null) = (lease_expires_at is null)
  ),
  -- Only pending deliveries are scheduled.
  constraint delivery_due_iff_pending check ((state = 'pending') = (next_attempt_at is not null))
);
-- Invariant 4: at most one request in flight per endpoint, enforced by the database.
create unique index delivery_one_in_flight on delivery (endpoint_id) where state = 'sending';
create index delivery_due_idx on delivery (next_attempt_at, endpoint_id) where state = 'pending';
create index delivery_endpoint_pending_idx on delivery (endpoint_id, next_attempt_at) where state = 'pending';
create index delivery_lease_idx on delivery (lease_expires_at) where state = 'sending';
create index delivery_endpoint_idx on delivery (endpoint_id, message_id);

create table attempt (
  id                   text primary key default herald_id('atmpt'),
  app_id               text not null,
  delivery_id          text not null references delivery (id) on delete cascade,
  message_id           text not null,
  endpoint_id          text not null,
  cycle                int not null,
  lease_token          uuid not null,
  trigger              text not null,
  url                  text not null,
  started_at           timestamptz not null default now(),
  finished_at          timestamptz,
  -- null while running; `unknown` when nobody can tell whether the receiver applied it.
  outcome              text,
  status_code          int,
  response_class       text,
  response_body        text,
  duration_ms          int,
  constraint attempt_outcome_known check (outcome in ('success', 'failure', 'unknown')),
  constraint attempt_finished_iff_outcome check ((outcome is null) = (finished_at is null))
);
create unique index attempt_one_per_lease on attempt (lease_token);
create index attempt_delivery_idx on attempt (delivery_id, id);
create index attempt_message_idx on attempt (message_id, id);
create index attempt_endpoint_idx on attempt (endpoint_id, id);

create table api_key (
  id         text primary key default herald_id('key'),
  name       text not null,
  -- Shown in listings to tell keys apart; lookups go by hash.
  prefix     text not null,
  hash       bytea not null unique,
  scopes     text[] not null,
  -- null: every app; otherwise the app ids this key may touch.
  app_ids    text[],
  created_at timestamptz not null default now(),
  revoked_at timestamptz,
  constraint api_key_scopes_known check (scopes <@ array['admin', 'publish', 'read'] and cardinality(scopes) > 0)
);

-- Who did what to which object. Never payloads or secrets.
create table audit_entry (
  id          bigint generated always as identity primary key,
  at          timestamptz not null default now(),
  actor       text not null,
  action      text not null,
  app_id      text,
  target_type text not null,
  target_id   text not null,
  details     jsonb not null default '{}'
);
create index audit_entry_target_idx on audit_entry (target_id, id);
