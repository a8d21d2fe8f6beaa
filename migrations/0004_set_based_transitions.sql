-- The claim and the outcome recording, set-based: a few statements per batch instead of several
-- per delivery, same guarantees.
--
-- Their plans are pinned. plpgsql caches a plan for each statement of a function and keeps it for
-- the life of the connection; planned while the tables were nearly empty, the outcome write's
-- `where lease_token = …` became a sequential scan, and a long-lived worker kept it as the table
-- grew (3.7 ms per recorded outcome at 10,000 attempts, growing without bound). Planning afresh on
-- every call avoids that but costs more than the statements themselves (1.5–3 ms each). These
-- functions only ever touch a handful of rows per call through indexes, so they keep one generic
-- plan per connection and are told what shape it must have: index lookups and nested loops, never
-- a scan of a whole table, whatever the statistics said when it was made.
-- Claim up to `batch` deliveries, at most one per endpoint, round-robin over endpoints starting
-- after `after_endpoint`.
--   1. Lock up to `batch` enabled endpoints that have due work and (on this snapshot) nothing in
--      flight, walking busy endpoints with a loose index scan from the cursor and wrapping
--      around; SKIP LOCKED, so claimers never wait on each other.
--   2. Under those locks, on a fresh snapshot (each statement of a VOLATILE plpgsql function
--      takes its own), lease the earliest due delivery of each locked endpoint that still has
--      nothing in flight, with a new fencing token, and insert its `started` attempt.
-- Every transition into `sending` therefore happens under the endpoint's row lock and is decided
-- on state read after the lock was taken; the partial unique index delivery_one_in_flight backs
-- it up regardless.
create or replace function herald_claim(batch int, lease interval, after_endpoint text)
returns table (
  delivery_id text, attempt_id text, lease_token uuid, lease_expires_at timestamptz,
  app_id text, message_id text, endpoint_id text, cycle int, attempts_in_cycle int,
  trigger text, url text, headers jsonb, secret_version int, idempotent boolean, client_error_policy text,
  event_type text, payload text, message_created_at timestamptz, business_key text
)
language plpgsql volatile
set plan_cache_mode = force_generic_plan
set enable_seqscan = off
set enable_hashjoin = off
set enable_mergejoin = off
as $$
declare
  locked text[];
begin
  with recursive
    -- Endpoints with pending work after the cursor, in id order: each step jumps to the next
    -- one, so the cost follows the number of busy endpoints, not the depth of their backlogs.
    after_cursor(id) as (
      (select p.endpoint_id from delivery p where p.state = 'pending' and p.endpoint_id > after_endpoint
        order by p.endpoint_id limit 1)
      union all
      select (select p.endpoint_id from delivery p where p.state = 'pending' and p.endpoint_id > c.id
              order by p.endpoint_id limit 1)
        from after_cursor c where c.id is not null
    ),
    -- …then from the start up to the cursor: the round robin wraps.
    before_cursor(id) as (
      (select p.endpoint_id from delivery p where p.state = 'pending' and p.endpoint_id > ''
        order by p.endpoint_id limit 1)
      union all
      select (select p.endpoint_id from delivery p where p.state = 'pending' and p.endpoint_id > c.id
              order by p.endpoint_id limit 1)
        from before_cursor c where c.id is not null and c.id <= after_endpoint
    ),
    busy(id) as (
      select id from after_cursor where id is not null
      union all
      select id from before_cursor where id is not null and id <= after_endpoint
    )
  -- LATERAL keeps the walk's order (the round robin) and its laziness: endpoints are tried one by
  -- one as the walk yields them, and the walk stops once `batch` of them are locked.
  select array_agg(t.id) into locked from (
    select e.id
      from busy
      cross join lateral (
        select e.id from endpoint e
         where e.id = busy.id and not e.disabled
           and exists (select 1 from delivery p
                        where p.endpoint_id = e.id and p.state = 'pending' and p.next_attempt_at <= now())
           -- A pre-filter on this statement's snapshot; the decision is statement 2's.
           and not exists (select 1 from delivery s where s.endpoint_id = e.id and s.state = 'sending')
           for no key update skip locked
      ) e
     limit batch
  ) t;

  if locked is null then
    return;
  end if;

  return query
  with picked as (
    select (select p.id from delivery p
             where p.endpoint_id = l.id and p.state = 'pending' and p.next_attempt_at <= now()
             order by p.next_attempt_at limit 1
             for update skip locked) as id
      from unnest(locked) as l(id)
     where not exists (select 1 from delivery s where s.endpoint_id = l.id and s.state = 'sending')
  ), leased as (
    update delivery u
       set state = 'sending', lease_token = gen_random_uuid(), lease_expires_at = now() + lease,
           next_attempt_at = null,
           attempts_in_cycle = u.attempts_in_cycle + 1, attempts_total = u.attempts_total + 1,
           updated_at = now()
      from picked
     where u.id = picked.id
    returning u.id, u.app_id, u.message_id, u.endpoint_id, u.cycle, u.attempts_in_cycle, u.trigger,
              u.lease_token, u.lease_expires_at
  ), started as (
    insert into attempt (app_id, delivery_id, message_id, endpoint_id, cycle, lease_token, trigger, url)
    select d.app_id, d.id, d.message_id, d.endpoint_id, d.cycle, d.lease_token, d.trigger, e.url
      from leased d join endpoint e on e.id = d.endpoint_id
    returning attempt.id, attempt.lease_token
  )
  select d.id, a.id, d.lease_token, d.lease_expires_at, d.app_id, d.message_id, d.endpoint_id, d.cycle,
         d.attempts_in_cycle, d.trigger, e.url, e.headers, e.secret_version, e.idempotent,
         e.client_error_policy, m.event_type, m.payload, m.created_at, m.business_key
    from leased d
    join started a on a.lease_token = d.lease_token
    join endpoint e on e.id = d.endpoint_id
    join message m on m.id = d.message_id
   -- Round-robin order: the caller continues after the last endpoint returned.
   order by d.endpoint_id <= after_endpoint, d.endpoint_id;
end
$$;

-- Record the outcomes of finished attempts: one item per attempt, as a JSON array of
-- {delivery_id, lease_token, outcome, status_code, response_class, response_body, duration_ms,
--  next_attempt_at, disable_endpoint, credentials_rejected}. `next_attempt_at` null on a
-- non-success means the cycle's budget is spent. Fencing: a delivery is only updated when it is
-- still `sending` under the same lease token; otherwise the lease was lost (recovered, taken
-- over) and the item reports recorded = false — unless an earlier try of this same call already
-- recorded it. Repeating a call is therefore harmless.
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
  ended_ids text[];
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
     where u.id = x.delivery_id and u.state = 'sending' and u.lease_token = x.lease_token
    returning u.id, u.endpoint_id, u.app_id, x.lease_token, x.outcome, x.status_code, x.response_class,
              x.response_body, x.duration_ms, x.disable_endpoint, x.credentials_rejected
  ), finished as (
    update attempt a
       set outcome = c.outcome, finished_at = now(), status_code = c.status_code,
           response_class = c.response_class, response_body = c.response_body, duration_ms = c.duration_ms
      from closed c
     where a.lease_token = c.lease_token
  )
  select coalesce(jsonb_agg(jsonb_build_object(
           'delivery_id', c.id, 'endpoint_id', c.endpoint_id, 'app_id', c.app_id, 'outcome', c.outcome,
           'status_code', c.status_code, 'disable_endpoint', c.disable_endpoint,
           'credentials_rejected', c.credentials_rejected) order by c.endpoint_id), '[]'),
         coalesce(array_agg(c.id), '{}')
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
         case when x.delivery_id = any(ended_ids) then true
              else exists (select 1 from attempt a
                            where a.lease_token = x.lease_token and a.outcome = x.outcome
                              and a.response_class is not distinct from x.response_class) end,
         x.delivery_id = any(disabled_by)
    from jsonb_to_recordset(items) as x(delivery_id text, lease_token uuid, outcome text, response_class text);
end
$$;

-- Fewer index writes per delivery.
-- Recording an outcome updates columns of the attempt that no index covers: with room left on its
-- page the new row version stays there (a HOT update) and none of the attempt's five indexes is
-- written. Free space only applies to pages filled from now on.
alter table attempt set (fillfactor = 60);
-- Expired leases are found among the rows in flight, which delivery_one_in_flight already lists
-- (at most one per endpoint): a second index over the same rows only cost a write per claim.
drop index delivery_lease_idx;
-- Failed deliveries are few and wait for a person; the metrics count them (and the unknown
-- attempts among them) at every scrape. Without an index of their own that count read the whole
-- delivery table — all of history — each time.
create index delivery_failed_idx on delivery (endpoint_id) where state = 'failed';
-- Nothing on a hot path reads deliveries in due-time order across endpoints: the claim walks
-- endpoints (delivery_endpoint_pending_idx), and so do the metrics' and doctor's due checks. The
-- global due index only cost a write per delivery at fan-out and per retry.
drop index delivery_due_idx;
