-- Idempotency keys of the API's requests other than publishing (a message keeps its own key).
--
-- A request with an `idempotency-key` runs once per caller and key: its answer is kept with the
-- key, written in the transaction of its effect, so a repeat (an SDK retrying after a lost
-- answer) gets the same answer and makes no second endpoint, resend or replay. The key's row is
-- the first thing that transaction writes: a concurrent repeat waits on it, then replays. A
-- request that fails leaves no row, and may be tried again. Rows are kept at least a day.
create table api_idempotency (
  -- The caller: the API key's id ('env-admin-key' for HERALD_ADMIN_KEY).
  scope text collate "C" not null,
  key text collate "C" not null,
  -- Method, path and body: a key used again for another request is refused, not replayed.
  request_sha256 bytea not null,
  status int,
  body jsonb,
  created_at timestamptz not null default now(),
  primary key (scope, key)
);
create index api_idempotency_created_at on api_idempotency (created_at);
