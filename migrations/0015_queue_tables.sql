-- The queue moves out of the delivery row into three narrow tables that follow it.
--
-- A delivery changes state twice per attempt (claimed, then its outcome). Each change rewrote the
-- row and wrote an entry into every index of the delivery table: PostgreSQL updates a row in place
-- on its page (HOT, no index written) only when no indexed column changes, and the partial indexes
-- on `state` (pending, in flight, failed) made every state change such a column. Those indexes now
-- live as tables of their own:
--
--   delivery_due     (endpoint_id, next_attempt_at, delivery_id)  one row per pending delivery
--   delivery_lease   (endpoint_id, delivery_id, lease_expires_at)  one slot per endpoint, holding
--                    its delivery in flight, if any: one in flight per endpoint by construction
--                    (invariant 4); its primary key is named delivery_one_in_flight
--   delivery_failed  (endpoint_id, delivery_id)                   one row per failed delivery
--
-- The delivery row keeps its state, schedule and lease for every reader; its indexes no longer
-- name any of them, so a claim and an outcome are HOT updates when the page has room (fill factor
-- 70). Publishing, the claim and the outcome write keep the queue tables in the statements that
-- change the deliveries; every other writer (recovery, give-back, resend, replay, deletes, an
-- operator's SQL) is followed by a statement-level trigger, which those three functions switch
-- off for their own statements (herald.queue_kept): a trigger's statements cost ~15 µs per firing,
-- most of a one-delivery claim's gain, and 13–15 µs of a one-delivery publish.
--
-- A lease fills its endpoint's slot and its end empties it, in place (HOT, pruned from the page
-- without VACUUM). A row per lease, inserted at the claim and deleted with the outcome, made the
-- table grow by ~100 bytes per delivery until a VACUUM: 104 MiB after 1,000,000 deliveries, as
-- autovacuum did not reach it during the run; the slots took 0.5 MiB.
--
-- Measured (2 cores): claim and outcome write back to back from one connection, 1,000 endpoints,
-- PostgreSQL backend CPU per delivery 70–77 → 61 µs at 128 per claim, 103 → 92 µs at 16, the same
-- at 1 (661–679 → 675). End to end, one worker, 1,000 endpoints, 100,000 deliveries, three
-- interleaved pairs: 10,370–10,742 → 10,756–11,475 deliveries/s, PostgreSQL CPU per delivery
-- 89.6–93.6 → 80.6–88.2 µs, the outcome write's share 34.5–37.6 → 27.1–33.3 µs, and 78–82 % of
-- the delivery updates HOT (none before).

drop index delivery_one_in_flight;
drop index delivery_endpoint_pending_idx;
drop index delivery_failed_idx;

-- Ids compare bytewise, as everywhere (0008). VACUUM does not truncate the due table's empty tail:
-- that takes an exclusive lock (a stall for claims and publishes, cancelled queries on replicas),
-- and a queue's empty pages are soon filled again.
create table delivery_due (
  endpoint_id     text collate "C" not null,
  next_attempt_at timestamptz not null,
  delivery_id     text collate "C" not null,
  primary key (endpoint_id, next_attempt_at, delivery_id)
) with (vacuum_truncate = false);

-- Room on each slot's page for the versions its leases write.
create table delivery_lease (
  endpoint_id      text collate "C" not null
                   constraint delivery_lease_endpoint_fkey references endpoint (id) on delete cascade,
  delivery_id      text collate "C",
  lease_expires_at timestamptz,
  -- Invariant 4: at most one request in flight per endpoint, enforced by the database.
  constraint delivery_one_in_flight primary key (endpoint_id),
  constraint delivery_lease_filled_whole check ((delivery_id is null) = (lease_expires_at is null))
) with (fillfactor = 50);

create table delivery_failed (
  endpoint_id text collate "C" not null,
  delivery_id text collate "C" not null,
  primary key (endpoint_id, delivery_id)
);

insert into delivery_due select endpoint_id, next_attempt_at, id from delivery where state = 'pending';
insert into delivery_lease select endpoint_id, id, lease_expires_at from delivery where state = 'sending';
insert into delivery_failed select endpoint_id, id from delivery where state = 'failed';

-- Raises, naming delivery_one_in_flight, unless every lease asked for found its slot empty. The
-- claim fills slots only under the endpoint's lock and after seeing them empty, so only a write
-- that bypasses it can meet a taken slot; two such writers at once are serialised by the slot's
-- row lock, and the second finds it taken.
create function herald_one_in_flight(filled bigint, wanted bigint)
returns boolean
language plpgsql volatile
as $$
begin
  if filled <> wanted then
    raise exception 'a lease found its endpoint''s slot taken (delivery_one_in_flight: one delivery in flight per endpoint)'
      using errcode = 'unique_violation', constraint = 'delivery_one_in_flight';
  end if;
  return true;
end
$$;

-- The rows a statement changed, as it found them and as it left them: each old row leaves its
-- queue table and each new row enters its own. A row whose state did not change leaves and enters
-- the same table (only a resend of a pending delivery does it), so the old rows leave in one
-- statement and the new ones enter in the next: one statement for both could insert a queue row
-- before deleting the same one.
--
-- Each queue row to delete or slot to empty is found by a LATERAL lookup with LIMIT from the
-- statement's rows, then changed by its tuple id: a plain join of the two would be planned once
-- per connection, from whatever the statistics of a queue table said then, and a plan that walks
-- the queue table for each of the statement's rows is quadratic in the batch (so is
-- `= any(array(…))`, which compares each row with the whole array). Only the holder of a
-- delivery's row lock changes the slot that holds it, so the slot's tuple id is stable meanwhile.
create function herald_follow_deliveries()
returns trigger
language plpgsql
set enable_seqscan = off
set enable_hashjoin = off
set enable_mergejoin = off
as $$
declare
  filled boolean;
begin
  -- The claim and the outcome write keep the queue tables themselves, in their own statements.
  if current_setting('herald.queue_kept', true) = 'on' then
    return null;
  end if;
  if tg_op in ('UPDATE', 'DELETE') then
    with left_due as (
      delete from delivery_due q where q.ctid = any(array(
        select k.ctid from old_rows o
         cross join lateral (
           select q.ctid from delivery_due q
            where q.endpoint_id = o.endpoint_id and q.next_attempt_at = o.next_attempt_at and q.delivery_id = o.id
            limit 1
         ) k
         where o.state = 'pending'))
    ), left_lease as (
      update delivery_lease l set delivery_id = null, lease_expires_at = null
       where l.ctid = any(array(
         select k.ctid from old_rows o
          cross join lateral (
            select l.ctid from delivery_lease l where l.endpoint_id = o.endpoint_id and l.delivery_id = o.id limit 1
          ) k
          where o.state = 'sending'))
    )
    delete from delivery_failed f where f.ctid = any(array(
      select k.ctid from old_rows o
       cross join lateral (
         select f.ctid from delivery_failed f where f.endpoint_id = o.endpoint_id and f.delivery_id = o.id limit 1
       ) k
       where o.state = 'failed'));
  end if;
  if tg_op in ('INSERT', 'UPDATE') then
    if exists (select 1 from new_rows n where n.state = 'sending' group by n.endpoint_id having count(*) > 1) then
      perform herald_one_in_flight(0, 1);
    end if;
    with entered_due as (
      insert into delivery_due (endpoint_id, next_attempt_at, delivery_id)
      select n.endpoint_id, n.next_attempt_at, n.id from new_rows n where n.state = 'pending'
    ), entered_failed as (
      insert into delivery_failed (endpoint_id, delivery_id)
      select n.endpoint_id, n.id from new_rows n where n.state = 'failed'
    ), entered_lease as (
      insert into delivery_lease (endpoint_id, delivery_id, lease_expires_at)
      select n.endpoint_id, n.id, n.lease_expires_at from new_rows n where n.state = 'sending'
      on conflict on constraint delivery_one_in_flight do update
        set delivery_id = excluded.delivery_id, lease_expires_at = excluded.lease_expires_at
        where delivery_lease.delivery_id is null
      returning 1
    )
    select herald_one_in_flight((select count(*) from entered_lease),
                                (select count(*) from new_rows n where n.state = 'sending'))
      into filled;
  end if;
  return null;
end
$$;

create trigger delivery_follow_insert after insert on delivery
  referencing new table as new_rows
  for each statement execute function herald_follow_deliveries();
create trigger delivery_follow_update after update on delivery
  referencing old table as old_rows new table as new_rows
  for each statement execute function herald_follow_deliveries();
create trigger delivery_follow_delete after delete on delivery
  referencing old table as old_rows
  for each statement execute function herald_follow_deliveries();

-- TRUNCATE of delivery empties the queue tables too.
create function herald_truncate_queue()
returns trigger
language plpgsql
as $$
begin
  truncate delivery_due, delivery_failed;
  update delivery_lease set delivery_id = null, lease_expires_at = null where delivery_id is not null;
  return null;
end
$$;

create trigger delivery_follow_truncate after truncate on delivery
  for each statement execute function herald_truncate_queue();

-- Room on every delivery's page for the versions its claim and outcome write. Free space only
-- applies to pages filled from now on.
alter table delivery set (fillfactor = 70);

-- As in 0011, walking the endpoints that have due work and picking each one's earliest due
-- delivery from delivery_due, and testing "nothing in flight" on its slot. The delivery row is
-- what is locked (SKIP LOCKED), never its queue row: a resend that holds the delivery is skipped,
-- where one waiting on a queue row the claim held would deadlock against it. The picked due rows
-- are deleted first, and exactly the deliveries whose row this statement deleted are leased: a
-- write that moved a picked delivery after this statement's snapshot took its due row already
-- (and may have put another in its place, which stays for the next claim).
create or replace function herald_claim(batch int, lease interval, after_endpoint text, claim uuid default null)
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
set enable_bitmapscan = off
set herald.queue_kept = on
as $$
declare
  locked text[];
begin
  perform pg_advisory_xact_lock_shared(hashtext('herald_claim'), hashtext(claim::text));
  with recursive
    -- Endpoints with due work after the cursor, in id order: each step jumps to the next one, so
    -- the cost follows the number of busy endpoints, not the depth of their backlogs.
    after_cursor(id) as (
      (select q.endpoint_id from delivery_due q where q.endpoint_id > after_endpoint
        order by q.endpoint_id limit 1)
      union all
      select (select q.endpoint_id from delivery_due q where q.endpoint_id > c.id
              order by q.endpoint_id limit 1)
        from after_cursor c where c.id is not null
    ),
    -- …then from the start up to the cursor: the round robin wraps.
    before_cursor(id) as (
      (select q.endpoint_id from delivery_due q where q.endpoint_id > ''
        order by q.endpoint_id limit 1)
      union all
      select (select q.endpoint_id from delivery_due q where q.endpoint_id > c.id
              order by q.endpoint_id limit 1)
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
           and exists (select 1 from delivery_due q where q.endpoint_id = e.id and q.next_attempt_at <= now())
           -- A pre-filter on this statement's snapshot; the decision is statement 2's.
           and not exists (select 1 from delivery_lease s where s.endpoint_id = e.id and s.delivery_id is not null)
           for no key update skip locked
      ) e
     limit batch
  ) t;

  if locked is null then
    return;
  end if;

  return query
  -- Each lookup by key is a LATERAL subquery with LIMIT, which the planner never flattens into a
  -- join: one index lookup per lease, whatever the sizes the cached plan was made for.
  with picked as (
    select p.id, p.due, e.url, e.headers, e.secret_version, e.idempotent, e.client_error_policy
      from unnest(locked) as l(id)
      cross join lateral (
        select e.url, e.headers, e.secret_version, e.idempotent, e.client_error_policy
          from endpoint e where e.id = l.id limit 1
      ) e
      cross join lateral (
        select p.id, q.ctid as due
          from delivery_due q join delivery p on p.id = q.delivery_id
         where q.endpoint_id = l.id and q.next_attempt_at <= now()
           and not exists (select 1 from delivery_lease s where s.endpoint_id = l.id and s.delivery_id is not null)
         order by q.next_attempt_at limit 1
         for update of p skip locked
      ) p
  ), unqueued as (
    -- The picked due rows still there: a write that moved or deleted a picked delivery after this
    -- statement's snapshot took its due row already, and that delivery is not leased here.
    delete from delivery_due q where q.ctid = any(array(select p.due from picked p))
    returning q.delivery_id
  ), dequeued as (
    select coalesce(jsonb_object_agg(g.delivery_id, true), '{}') as ids from unqueued g
  ), leased as (
    update delivery u
       set state = 'sending', lease_token = gen_random_uuid(), lease_expires_at = now() + lease,
           next_attempt_at = null,
           attempts_in_cycle = u.attempts_in_cycle + 1, attempts_total = u.attempts_total + 1,
           updated_at = now()
      from picked
     -- Its due row was this statement's to delete (a jsonb object: one lookup, not a scan of the batch).
     where u.id = picked.id and u.state = 'pending' and (select d.ids from dequeued d) ? picked.id
    -- The attempt's id is chosen here, so that the result needs no join back from the attempts
    -- to their leases (which the pinned nested loops made quadratic in the batch).
    returning u.id, u.app_id, u.message_id, u.endpoint_id, u.cycle, u.attempts_in_cycle, u.trigger,
              u.lease_token, u.lease_expires_at, herald_id('atmpt') as attempt_id,
              picked.url, picked.headers, picked.secret_version, picked.idempotent, picked.client_error_policy
  ), started as (
    insert into attempt (id, app_id, delivery_id, message_id, endpoint_id, cycle, lease_token, trigger, url,
                         claim_id)
    select d.attempt_id, d.app_id, d.id, d.message_id, d.endpoint_id, d.cycle, d.lease_token, d.trigger, d.url, claim
      from leased d
  ), in_flight as (
    insert into delivery_lease (endpoint_id, delivery_id, lease_expires_at)
    select d.endpoint_id, d.id, d.lease_expires_at from leased d
    on conflict on constraint delivery_one_in_flight do update
      set delivery_id = excluded.delivery_id, lease_expires_at = excluded.lease_expires_at
      where delivery_lease.delivery_id is null
    returning 1
  )
  select d.id, d.attempt_id, d.lease_token, d.lease_expires_at, d.app_id, d.message_id, d.endpoint_id, d.cycle,
         d.attempts_in_cycle, d.trigger, d.url, d.headers, d.secret_version, d.idempotent,
         d.client_error_policy, m.event_type, m.payload, m.created_at, m.business_key
    from leased d
    cross join lateral (
      select m.event_type, m.payload, m.created_at, m.business_key from message m where m.id = d.message_id limit 1
    ) m
   where herald_one_in_flight((select count(*) from in_flight), (select count(*) from leased))
   -- Round-robin order: the caller continues after the last endpoint returned.
   order by d.endpoint_id <= after_endpoint, d.endpoint_id;
end
$$;

-- As in 0012, ending each lease by emptying its slot and queueing a retry in delivery_due or a
-- final failure in delivery_failed, in the statement that records the outcomes.
create or replace function herald_record_outcomes(items jsonb, disable_after int)
returns table (delivery_id text, recorded boolean, endpoint_disabled boolean)
language plpgsql volatile
set plan_cache_mode = force_generic_plan
set enable_seqscan = off
set enable_hashjoin = off
set enable_mergejoin = off
set enable_bitmapscan = off
set herald.queue_kept = on
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
    returning u.id, u.endpoint_id, u.app_id, u.state, u.next_attempt_at, x.lease_token, x.outcome,
              x.status_code, x.response_class, x.response_body, x.duration_ms, x.disable_endpoint,
              x.credentials_rejected
  ), finished as (
    update attempt a
       set outcome = c.outcome, finished_at = now(), status_code = c.status_code,
           response_class = c.response_class, response_body = c.response_body, duration_ms = c.duration_ms
      from closed c
     where a.delivery_id = c.id and a.lease_token = c.lease_token
  ), unleased as (
    -- Each slot found by a LATERAL lookup with LIMIT, updated by tuple id (as the trigger does).
    -- Only the holder of its delivery's row lock, this statement, changes a filled slot.
    update delivery_lease l set delivery_id = null, lease_expires_at = null
     where l.ctid = any(array(
       select k.ctid from closed c
        cross join lateral (
          select l.ctid from delivery_lease l where l.endpoint_id = c.endpoint_id and l.delivery_id = c.id limit 1
        ) k))
  ), requeued as (
    insert into delivery_due (endpoint_id, next_attempt_at, delivery_id)
    select c.endpoint_id, c.next_attempt_at, c.id from closed c where c.state = 'pending'
  ), parked as (
    insert into delivery_failed (endpoint_id, delivery_id)
    select c.endpoint_id, c.id from closed c where c.state = 'failed'
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

-- As in 0012, the expired leases found through the slots. The expiry is tested on the delivery
-- too: the lock re-reads the delivery, never the slot, and a lease that ended and was claimed
-- again since this statement's snapshot is live.
create or replace function herald_recover_expired_leases(max_attempts int, batch int)
returns table (delivery_id text, endpoint_id text, lease_token uuid)
language sql volatile as $$
  with expired as (
    select d.id, d.lease_token from delivery_lease l join delivery d on d.id = l.delivery_id
     -- The expiry is tested on the delivery too: the lock re-reads the delivery, never the slot,
     -- and a lease that ended and was taken again since this statement's snapshot is live.
     where l.lease_expires_at < now() and d.state = 'sending' and d.lease_expires_at < now()
     order by l.lease_expires_at
     limit batch
     for update of d skip locked
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

-- As in 0012, walking the slots (in key order: a walk of delivery_one_in_flight), each delivery
-- found by its id and its attempt through the delivery.
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
      from delivery_lease l
      cross join lateral (
        select d.id, d.lease_token from delivery d where d.id = l.delivery_id and d.state = 'sending' limit 1
      ) d
     where exists (select 1 from attempt a
                    where a.delivery_id = d.id and a.lease_token = d.lease_token
                      and a.claim_id = claim and a.outcome is null)
     order by l.endpoint_id
  loop
    if herald_release_unsent(lost.lease_token, lost.id) then
      released := released + 1;
    end if;
  end loop;
  return released;
end
$$;

-- As in 0011, with the due rows of the deliveries it creates.
create or replace function herald_publish_messages(items jsonb, wake boolean)
returns table (
  ord int, created boolean, id text, app_id text, event_type text, event_id text, payload text,
  channels text[], tags text[], created_at timestamptz, request_hash bytea, deliveries int
)
language plpgsql volatile
set plan_cache_mode = force_generic_plan
set enable_seqscan = off
set enable_mergejoin = off
set herald.queue_kept = on
as $$
#variable_conflict use_column
declare
  inserted jsonb;
  any_delivery boolean;
begin
  with input as materialized (
    select x.*, coalesce(x.id, herald_id('msg')) as new_id
      from jsonb_to_recordset(items) as x(
        ord int, id text, app_id text, event_type text, event_id text, payload text, channels text[],
        tags text[], idempotency_key text, request_hash text, retention_days int, business_key text,
        only_endpoint_id text, actor text)
  ), msg as (
    insert into message (id, app_id, event_type, event_id, payload, channels, tags, idempotency_key,
                         request_hash, payload_expires_at, business_key)
    select new_id, app_id, event_type, event_id, payload, channels, tags, idempotency_key,
           decode(request_hash, 'hex'), now() + make_interval(days => retention_days), business_key
      -- Key order: concurrent batches take the keys' index entries in one order, never crosswise
      -- (a deadlock). Among items of one key, the first by ord is inserted; the others replay it.
      from input order by app_id, idempotency_key, ord
    on conflict (app_id, idempotency_key) do nothing
    returning message.id
  ), fanout as (
    insert into delivery (app_id, message_id, endpoint_id, next_attempt_at)
    select i.app_id, i.new_id, e.id, now()
      from msg join input i on i.new_id = msg.id
      -- OFFSET 0 keeps this a subquery of its own, run once per message with the app's id as its
      -- key: a plan that joined the tables could read every endpoint of every app for each one.
      cross join lateral (
        select e.id from endpoint e
         where e.app_id = i.app_id
           and case when i.only_endpoint_id is not null then e.id = i.only_endpoint_id
                    else (e.filter_types is null or i.event_type = any(e.filter_types))
                         and (e.channels is null or e.channels && coalesce(i.channels, '{}')) end
        offset 0
      ) e
    returning delivery.id, delivery.endpoint_id, delivery.next_attempt_at, delivery.message_id
  ), queued as (
    insert into delivery_due (endpoint_id, next_attempt_at, delivery_id)
    select f.endpoint_id, f.next_attempt_at, f.id from fanout f
  ), audit as (
    insert into audit_entry (actor, action, app_id, target_type, target_id)
    select i.actor, 'message.created', i.app_id, 'message', i.new_id from msg join input i on i.new_id = msg.id
  ), counted as (
    select f.message_id, count(*)::int as n from fanout f group by f.message_id
  )
  select coalesce(jsonb_agg(jsonb_build_object('ord', i.ord, 'id', i.new_id, 'deliveries', coalesce(c.n, 0))), '[]'),
         coalesce(bool_or(c.n > 0), false)
    into inserted, any_delivery
    from msg join input i on i.new_id = msg.id left join counted c on c.message_id = msg.id;

  if wake and any_delivery then
    perform pg_notify('herald_work', '');
  end if;

  return query
  select x.ord, d.id is not null, m.id, m.app_id, m.event_type, m.event_id, m.payload, m.channels,
         m.tags, m.created_at, m.request_hash, coalesce(d.deliveries, 0)
    from jsonb_to_recordset(items) as x(ord int, app_id text, idempotency_key text)
    left join jsonb_to_recordset(inserted) as d(ord int, id text, deliveries int) on d.ord = x.ord
    -- Every item gets its row, even one whose earlier message vanished meanwhile (id null then).
    left join lateral (
      select m.* from message m where m.id = d.id
      union all
      select m.* from message m
       where d.id is null and m.app_id = x.app_id and m.idempotency_key = x.idempotency_key
      limit 1
    ) m on true
   order by x.ord;
end
$$;
