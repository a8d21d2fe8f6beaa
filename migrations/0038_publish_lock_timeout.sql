-- herald's own batched writes wait at most 2 s for a lock: the publishes of a group commit
-- (through herald_publish_grouped) and the receipts (herald_record_receipts, which only the intake
-- group commit calls). Batches are written one behind another on one connection: a publish to an
-- app whose deletion is cascading (its row locked until that commits), or whose idempotency key
-- or event id another transaction holds, held its batch, every batch queued behind it, and the
-- writer beside them once it took one of that app's publishes — every tenant's publishes in that
-- process, for as long as the lock lasted. Past 2 s the batch is refused (55P03), its items are
-- written again one by one, and only the one that waits is answered 503, to retry.
--
-- A publish in the caller's own transaction (the library) still calls herald_publish_messages,
-- which waits as the caller's transaction does: a 2 s limit there would abort the caller's work,
-- and a second publish of an idempotency key waits for the first to commit, to answer its message.

create function herald_publish_grouped(items jsonb, wake boolean)
returns table (
  ord int, created boolean, id text, app_id text, event_type text, event_id text, payload text,
  channels text[], tags text[], created_at timestamptz, request_hash bytea, deliveries int,
  event_id_taken boolean
)
language sql volatile
set lock_timeout = '2s'
as $$
  select * from herald_publish_messages(items, wake)
$$;

alter function herald_record_receipts(jsonb, int) set lock_timeout = '2s';
