-- Record finished attempts and claim the next batch in one call: one round trip and one commit
-- where there were two of each. Recording frees the endpoints it finishes — for a single busy
-- endpoint, the one its next delivery waits for — and the claim after it, on a fresh snapshot,
-- can take them at once. The same guarantees as herald_record_outcomes followed by herald_claim,
-- in one transaction. A row is either a recorded outcome (recorded_delivery_id set) or a claim.
create function herald_record_and_claim(
  items jsonb, disable_after int, batch int, lease interval, after_endpoint text
)
returns table (
  recorded_delivery_id text, recorded boolean, endpoint_disabled boolean,
  delivery_id text, attempt_id text, lease_token uuid, lease_expires_at timestamptz,
  app_id text, message_id text, endpoint_id text, cycle int, attempts_in_cycle int,
  trigger text, url text, headers jsonb, secret_version int, idempotent boolean, client_error_policy text,
  event_type text, payload text, message_created_at timestamptz, business_key text
)
language plpgsql volatile
as $$
begin
  return query
  select r.delivery_id, r.recorded, r.endpoint_disabled,
         null::text, null::text, null::uuid, null::timestamptz, null::text, null::text, null::text,
         null::int, null::int, null::text, null::text, null::jsonb, null::int, null::boolean, null::text,
         null::text, null::text, null::timestamptz, null::text
    from herald_record_outcomes(items, disable_after) r;
  return query
  select null::text, null::boolean, null::boolean, c.*
    from herald_claim(batch, lease, after_endpoint) c;
end
$$;
