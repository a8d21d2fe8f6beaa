-- A lease's slot is emptied by its key, not by its tuple id. The outcome write and the trigger that
-- follows the other writers (lease recovery, a lease given back) found the slot in their snapshot
-- and updated that tuple id; but a filled slot's other columns are changed by writers that do not
-- hold its delivery's lock — a lift of the endpoint's rest (resend, recovery, replay, enable) and
-- tending clearing a rest's mark — and when one committed in between, the update followed the row
-- to its new version, whose tuple id no longer matched, and emptied nothing. The delivery was
-- finished with its slot still filled: no claim took the endpoint again, and lease recovery, which
-- goes by the deliveries' leases, never freed it. Matched by (endpoint, delivery), the update
-- re-checks the new version and empties it. Otherwise as in 0030 and 0034.
--
-- Lease recovery empties a slot that such a write left filled: its lease has run out, and its
-- delivery, locked, is no longer sending. That mends the databases this happened to before, and any
-- slot left so however it came about: recovery walks the slots whose lease ran out, and one whose
-- delivery is finished no longer keeps its endpoint from every claim, nor stays at the head of that
-- walk (by expiry) for good.

create or replace function herald_follow_deliveries()
returns trigger
language plpgsql
set enable_seqscan = off
set enable_hashjoin = off
set enable_mergejoin = off
set jit = off
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
    ), left_deferred as (
      delete from delivery_deferred q where q.ctid = any(array(
        select k.ctid from old_rows o
         cross join lateral (
           select q.ctid from delivery_deferred q
            where q.endpoint_id = o.endpoint_id and q.next_attempt_at = o.next_attempt_at and q.delivery_id = o.id
            limit 1
         ) k
         where o.state = 'pending'))
    ), left_lease as (
      -- By key, not by tuple id: see the header.
      update delivery_lease l set delivery_id = null, lease_expires_at = null
        from old_rows o
       where o.state = 'sending' and l.endpoint_id = o.endpoint_id and l.delivery_id = o.id
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
      select n.endpoint_id, n.next_attempt_at, n.id from new_rows n
       where n.state = 'pending' and n.next_attempt_at <= now() + herald_defer_horizon()
    ), entered_deferred as (
      insert into delivery_deferred (endpoint_id, next_attempt_at, delivery_id)
      select n.endpoint_id, n.next_attempt_at, n.id from new_rows n
       where n.state = 'pending' and n.next_attempt_at > now() + herald_defer_horizon()
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

create or replace function herald_record_outcomes(items jsonb, disable_after int)
returns table (delivery_id text, recorded boolean, endpoint_disabled boolean)
language plpgsql volatile
set plan_cache_mode = force_generic_plan
set enable_seqscan = off
set enable_hashjoin = off
set enable_mergejoin = off
set enable_bitmapscan = off
set herald.queue_kept = on
set jit = off
as $$
declare
  ended jsonb;
  ended_ids jsonb;
  disabled_by text[] := '{}';
  f record;
  disabled_now boolean;
  failures int;
  pause double precision;
  rest_end timestamptz;
begin
  -- End every lease still held, and finish its attempt, in one statement.
  with x as (
    select * from jsonb_to_recordset(items) as x(
      delivery_id text, lease_token uuid, outcome text, status_code int, response_class text,
      response_body text, duration_ms int, next_attempt_at timestamptz, disable_endpoint text,
      credentials_rejected boolean, endpoint_at_fault boolean, pause_steps jsonb, retry_after double precision)
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
              x.credentials_rejected, x.endpoint_at_fault, x.pause_steps, x.retry_after,
              -- Restarted by a resend queued behind this attempt (herald_resend_after_attempt).
              u.trigger = 'manual' as resent
  ), finished as (
    update attempt a
       set outcome = c.outcome, finished_at = now(), status_code = c.status_code,
           response_class = c.response_class, response_body = c.response_body, duration_ms = c.duration_ms
      from closed c
     where a.delivery_id = c.id and a.lease_token = c.lease_token
  ), unleased as (
    -- By key, not by tuple id: see the header.
    update delivery_lease l set delivery_id = null, lease_expires_at = null
      from closed c
     where l.endpoint_id = c.endpoint_id and l.delivery_id = c.id
  ), requeued as (
    -- A retry due within the horizon waits for the claims; one due later, out of their walk.
    insert into delivery_due (endpoint_id, next_attempt_at, delivery_id)
    select c.endpoint_id, c.next_attempt_at, c.id from closed c
     where c.state = 'pending' and c.next_attempt_at <= now() + herald_defer_horizon()
  ), waiting as (
    insert into delivery_deferred (endpoint_id, next_attempt_at, delivery_id)
    select c.endpoint_id, c.next_attempt_at, c.id from closed c
     where c.state = 'pending' and c.next_attempt_at > now() + herald_defer_horizon()
  ), parked as (
    insert into delivery_failed (endpoint_id, delivery_id)
    select c.endpoint_id, c.id from closed c where c.state = 'failed'
  )
  select coalesce(jsonb_agg(jsonb_build_object(
           'delivery_id', c.id, 'endpoint_id', c.endpoint_id, 'app_id', c.app_id, 'outcome', c.outcome,
           'status_code', c.status_code, 'disable_endpoint', c.disable_endpoint,
           'credentials_rejected', c.credentials_rejected, 'endpoint_at_fault', c.endpoint_at_fault,
           'pause_steps', c.pause_steps, 'retry_after', c.retry_after, 'resent', c.resent)
           order by c.endpoint_id), '[]'),
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

  -- Known failures of the endpoint count towards auto-disable (`unknown` says nothing about the
  -- endpoint, and nor does a failure of herald's own: `endpoint_at_fault` false; an item without
  -- the field, from a worker of the version before, counts as before). They are the rare path:
  -- one statement each, as the decision and its audit row belong together.
  for f in
    select * from jsonb_to_recordset(ended) as o(
      delivery_id text, endpoint_id text, app_id text, outcome text, status_code int, disable_endpoint text,
      endpoint_at_fault boolean, pause_steps double precision[], retry_after double precision, resent boolean)
     where o.outcome = 'failure' and o.endpoint_at_fault is not false
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
      update endpoint e set consecutive_failures = e.consecutive_failures + 1 where e.id = f.endpoint_id
      returning e.consecutive_failures into failures;
      -- The step after the failures before this one (schedule[n - 1] after the n-th), and the
      -- receiver's Retry-After, whichever is longer.
      pause := greatest(
        coalesce(f.retry_after, 0),
        case when failures >= 2
             then coalesce(f.pause_steps[least(failures - 1, cardinality(f.pause_steps))], 0) else 0 end);
      -- A resend queued behind this attempt asked for a send now, as a resend after it would
      -- have: the failure counts, but starts no rest.
      if pause > 0 and not f.resent then
        -- Resting beyond the horizon: marked, for tending to move its due rows out of the walk.
        rest_end := now() + make_interval(secs => pause);
        update delivery_lease s
           set next_start_at = greatest(s.next_start_at, rest_end),
               rests_until = case when greatest(s.next_start_at, rest_end) > now() + herald_defer_horizon()
                                  then greatest(s.next_start_at, rest_end) else s.rests_until end
         where s.endpoint_id = f.endpoint_id;
      end if;
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

create or replace function herald_recover_expired_leases(schedule double precision[], jitter double precision, batch int)
returns table (delivery_id text, endpoint_id text, lease_token uuid)
language sql volatile
-- As in 0016: the lookups' estimates must not cost a plan past jit_above_cost.
set jit = off
as $$
  with ran_out as (
    select l.endpoint_id, d.id, d.lease_token, d.state = 'sending' as expired, d.state <> 'sending' as left_filled
      from delivery_lease l
      cross join lateral (
        -- A live lease (whatever the slot says) is neither, and is not locked.
        select d.id, d.lease_token, d.state from delivery d
         where d.id = l.delivery_id and (d.state <> 'sending' or d.lease_expires_at < now())
         limit 1
         for update of d skip locked
      ) d
     where l.lease_expires_at < now()
     order by l.lease_expires_at
     limit batch
  ), expired as (
    select r.id, r.lease_token from ran_out r where r.expired
  ), emptied as (
    -- Its delivery locked and finished: no lease of it is live, and no writer will empty the slot.
    update delivery_lease l set delivery_id = null, lease_expires_at = null
      from ran_out r
     where r.left_filled and l.endpoint_id = r.endpoint_id and l.delivery_id = r.id
  ), released as (
    update delivery d
       set state = case when d.attempts_in_cycle > cardinality(schedule) or not e.idempotent then 'failed'
                        else 'pending' end,
           -- The step after attempt n is schedule[n] (arrays count from 1 here).
           next_attempt_at = case when d.attempts_in_cycle > cardinality(schedule) or not e.idempotent then null
                                  else now() + make_interval(
                                    secs => coalesce(schedule[d.attempts_in_cycle], 0) * (1 + jitter * (2 * random() - 1)))
                             end,
           lease_token = null, lease_expires_at = null, trigger = 'scheduled', updated_at = now()
      from expired, endpoint e
     where d.id = expired.id and e.id = d.endpoint_id
    returning d.id, d.endpoint_id, expired.lease_token
  ), marked as (
    update attempt a
       set outcome = 'unknown', finished_at = now(), response_class = 'lease_expired'
     where a.ctid = any(array(
       select k.ctid from released r
        cross join lateral (
          select a.ctid from attempt a
           where a.delivery_id = r.id and a.lease_token = r.lease_token and a.outcome is null
           limit 1
        ) k))
    returning a.id
  )
  select released.id, released.endpoint_id, released.lease_token from released
$$;
