-- Attempts are found by their delivery, not by their lease token alone.
--
-- `attempt_one_per_lease` indexed every attempt by its lease token, a random uuid: the only index
-- of the hot tables keyed by a random value. The others grow at their right edge (ids are
-- time-ordered); this one took each new attempt at a random leaf page, and once the history
-- outgrows the buffer cache each claim may read and dirty a page per attempt for it. With
-- 3,000,000 attempts of history (serial loop, claims of 128, interleaved against a copy with it),
-- the claim and the outcome write took 189 µs per delivery with it and 148 without; with 40,000,
-- within 3 %; end to end up to 1,000,000 deliveries, within the noise (199 against 202 s). Every
-- lookup by lease token also knows the delivery, and a delivery has a handful of attempts:
-- attempt_delivery_idx (delivery_id, id) finds them. An attempt per lease is unique by
-- construction: each lease token is drawn once, by the claim that inserts its attempt.

drop index attempt_one_per_lease;

-- As in 0011, each attempt found through its delivery.
create or replace function herald_record_outcomes(items jsonb, disable_after int)
returns table (delivery_id text, recorded boolean, endpoint_disabled boolean)
language plpgsql volatile
set plan_cache_mode = force_generic_plan
set enable_seqscan = off
set enable_hashjoin = off
set enable_mergejoin = off
as $$
declare
  ended jsonb;
  ended_ids jsonb;
  disabled_by text[] := '{}';
  f record;
  disabled_now boolean;
begin
  -- End every lease still held, and finish its attempt, in one statement.
  with x as (
    select * from jsonb_to_recordset(items) as x(
      delivery_id text, lease_token uuid, outcome text, status_code int, response_class text,
      response_body text, duration_ms int, next_attempt_at timestamptz, disable_endpoint text,
      credentials_rejected boolean)
    order by x.delivery_id
  ), closed as (
    update delivery u
       set state = case when x.outcome = 'success' then 'succeeded'
                        when x.next_attempt_at is null then 'failed'
                        else 'pending' end,
           next_attempt_at = case when x.outcome = 'success' then null else x.next_attempt_at end,
           lease_token = null, lease_expires_at = null, trigger = 'scheduled', updated_at = now()
      from x
     -- A lease token is set exactly while the delivery is sending (delivery_lease_iff_sending):
     -- matching it is the fencing. Naming the state too would let the plan walk the in-flight
     -- index (every lease of every worker) for each item instead of one primary-key lookup.
     where u.id = x.delivery_id and u.lease_token = x.lease_token
    returning u.id, u.endpoint_id, u.app_id, x.lease_token, x.outcome, x.status_code, x.response_class,
              x.response_body, x.duration_ms, x.disable_endpoint, x.credentials_rejected
  ), finished as (
    update attempt a
       set outcome = c.outcome, finished_at = now(), status_code = c.status_code,
           response_class = c.response_class, response_body = c.response_body, duration_ms = c.duration_ms
      from closed c
     where a.delivery_id = c.id and a.lease_token = c.lease_token
  )
  select coalesce(jsonb_agg(jsonb_build_object(
           'delivery_id', c.id, 'endpoint_id', c.endpoint_id, 'app_id', c.app_id, 'outcome', c.outcome,
           'status_code', c.status_code, 'disable_endpoint', c.disable_endpoint,
           'credentials_rejected', c.credentials_rejected) order by c.endpoint_id), '[]'),
         coalesce(jsonb_object_agg(c.id, true), '{}')
    into ended, ended_ids from closed c;

  -- The endpoints' health, in endpoint order (a fixed lock order: concurrent batches cannot
  -- deadlock). A success clears the failure count and a credentials flag; 401/403 sets the flag.
  update endpoint e
     set consecutive_failures = case when o.outcome = 'success' then 0 else e.consecutive_failures end,
         credentials_rejected_at = case when o.credentials_rejected then now()
                                        when o.outcome = 'success' then null
                                        else e.credentials_rejected_at end
    from jsonb_to_recordset(ended) as o(endpoint_id text, outcome text, credentials_rejected boolean)
   where e.id = o.endpoint_id
     and (o.credentials_rejected
          or (o.outcome = 'success' and (e.consecutive_failures <> 0 or e.credentials_rejected_at is not null)));

  -- Known failures count towards auto-disable (`unknown` says nothing about the endpoint). They
  -- are the rare path: one statement each, as the decision and its audit row belong together.
  for f in
    select * from jsonb_to_recordset(ended) as o(
      delivery_id text, endpoint_id text, app_id text, outcome text, status_code int, disable_endpoint text)
     where o.outcome = 'failure'
     order by o.endpoint_id
  loop
    disabled_now := false;
    update endpoint e
       set consecutive_failures = e.consecutive_failures + 1,
           disabled = true,
           disabled_reason = coalesce(f.disable_endpoint, 'failures'),
           updated_at = now()
     where e.id = f.endpoint_id and not e.disabled
       and (f.disable_endpoint is not null or e.consecutive_failures + 1 >= disable_after)
    returning true into disabled_now;
    if disabled_now then
      disabled_by := disabled_by || f.delivery_id;
      -- The worker's decision is an administrative change like any other: it is audited.
      insert into audit_entry (actor, action, app_id, target_type, target_id, details)
        values ('worker', 'endpoint.disabled', f.app_id, 'endpoint', f.endpoint_id,
                jsonb_build_object('reason', coalesce(f.disable_endpoint, 'failures'),
                                   'deliveryId', f.delivery_id, 'statusCode', f.status_code));
    else
      update endpoint e set consecutive_failures = e.consecutive_failures + 1 where e.id = f.endpoint_id;
    end if;
  end loop;

  -- One row per item. An item that ended nothing either lost its lease, or is the repeat of a
  -- write whose commit succeeded but whose reply was lost: then it finds its own outcome.
  return query
  select x.delivery_id,
         case when ended_ids ? x.delivery_id then true
              else exists (select 1 from attempt a
                            where a.delivery_id = x.delivery_id and a.lease_token = x.lease_token
                              and a.outcome = x.outcome
                              and a.response_class is not distinct from x.response_class) end,
         x.delivery_id = any(disabled_by)
    from jsonb_to_recordset(items) as x(delivery_id text, lease_token uuid, outcome text, response_class text);
end
$$;

-- As in 0002, each attempt found through its delivery.
create or replace function herald_recover_expired_leases(max_attempts int, batch int)
returns table (delivery_id text, endpoint_id text, lease_token uuid)
language sql volatile as $$
  with expired as (
    select d.id, d.lease_token from delivery d
     where d.state = 'sending' and d.lease_expires_at < now()
     order by d.lease_expires_at
     limit batch
     for update skip locked
  ), released as (
    update delivery d
       set state = case when d.attempts_in_cycle >= max_attempts or not e.idempotent then 'failed'
                        else 'pending' end,
           next_attempt_at = case when d.attempts_in_cycle >= max_attempts or not e.idempotent then null
                                  else now() end,
           lease_token = null, lease_expires_at = null, trigger = 'scheduled', updated_at = now()
      from expired, endpoint e
     where d.id = expired.id and e.id = d.endpoint_id
    returning d.id, d.endpoint_id, expired.lease_token
  ), marked as (
    update attempt a
       set outcome = 'unknown', finished_at = now(), response_class = 'lease_expired'
      from released
     where a.delivery_id = released.id and a.lease_token = released.lease_token and a.outcome is null
    returning a.id
  )
  -- `marked` runs although nothing reads it: data-modifying CTEs always execute.
  select released.id, released.endpoint_id, released.lease_token from released
$$;

-- As in 0010, each attempt found through its delivery.
create or replace function herald_release_claim(claim uuid)
returns int
language plpgsql volatile
set enable_seqscan = off
set enable_hashjoin = off
set enable_mergejoin = off
as $$
declare
  lost record;
  released int := 0;
begin
  perform pg_advisory_xact_lock(hashtext('herald_claim'), hashtext(claim::text));
  -- The leases are found first and given back one by one: a call of herald_release_unsent in a
  -- WHERE clause would be evaluated wherever the planner puts it, on leases of other claims too.
  for lost in
    select d.id, d.lease_token
      from delivery d join attempt a on a.delivery_id = d.id and a.lease_token = d.lease_token
     where d.state = 'sending' and a.claim_id = claim and a.outcome is null
  loop
    if herald_release_unsent(lost.lease_token, lost.id) then
      released := released + 1;
    end if;
  end loop;
  return released;
end
$$;
