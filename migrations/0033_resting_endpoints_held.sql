-- A resting endpoint's backlog waits out of the claims' walk, as a disabled endpoint's does.
--
-- Since 0032 a failing endpoint rests before its next request: with the default schedule 5 s after
-- its second failure in a row, 5 minutes after the third, 30 after the fourth, and as long as a
-- Retry-After it sent. Its due rows stayed in delivery_due with its slot closed, and every claim
-- stepped over it (~4.3 µs each; in an outage of 5,000 endpoints with backlogs, ~20 ms a claim for
-- the half hour before they are disabled; docs/performance.md, "What a claim walks").
--
-- Now an endpoint whose rest ends later than the horizon (herald_defer_horizon(), 60 s) is closed as
-- a disabled one is, and tending moves its rows out of the walk:
--
--   * the outcome write that starts such a rest marks the slot (delivery_lease.rests_until), and
--     tending holds the endpoint's due rows in delivery_deferred — only the outcome write's mark, no
--     rows moved on that hot path;
--   * only an endpoint with at most 1,000 due rows is held: moving a backlog out and back costs
--     ~25 µs a row each way, against ~4.3 µs a claim for stepping over it, so a large backlog is
--     cheaper left in the walk (one step), and an outage of many endpoints, each with a few, is
--     what the walk suffers from; a larger one loses its mark, and stays in the walk for that rest;
--   * tending releases the held rows once the rest ends within the horizon (a step at every
--     tending, over the marked slots), before the slot opens;
--   * lifting a rest (a resend, a recovery, an enable: herald_lift_endpoint_pause) releases them at
--     once. A resend's or a recovery's lift waits for an outcome write of the endpoint under way (it
--     locks the slot, which that write holds), so it lifts a rest that write starts; an enable's,
--     which holds the endpoint that write locks next, does not wait. A hold under way beside a lift
--     (tending waits for no lock) may leave rows held: the lift marks the slot as ended now, and
--     the next tending releases them.
--
-- The mark has an index of its own, on the marked slots only: the claims, and the outcome writes
-- but for one that starts a long rest, never change it, so their updates of a slot stay HOT
-- (next_start_at, which a throttled endpoint's claims set at every lease, is not indexed). Tending
-- clears marks a minute after they end.

alter table delivery_lease add column rests_until timestamptz;
create index delivery_lease_resting on delivery_lease (rests_until) where rests_until is not null;

-- An endpoint rests beyond the horizon: its slot opens later than herald_defer_horizon() from now.
create function herald_endpoint_resting(endpoint text)
returns boolean
language sql stable
as $$
  select exists (select 1 from delivery_lease s
                  where s.endpoint_id = endpoint and s.next_start_at > now() + herald_defer_horizon())
$$;

-- As in 0030, for an endpoint disabled or resting beyond the horizon.
create or replace function herald_hold_endpoint(endpoint text, batch int)
returns int
language plpgsql volatile
set enable_seqscan = off
set jit = off
as $$
declare
  moved int;
begin
  -- Still closed. Disabled, it stays so until this transaction ends: an enable waits for it (and
  -- then releases what this moved), or holds the endpoint already (then nothing is held here). A
  -- lift does not wait: see herald_lift_endpoint_pause.
  perform 1 from endpoint x
   where x.id = endpoint and (x.disabled or herald_endpoint_resting(x.id))
     for share skip locked;
  if not found then
    return 0;
  end if;
  with picked as materialized (
    select q.ctid as at
      from delivery_due q
      cross join lateral (
        select 1 from delivery p where p.id = q.delivery_id limit 1 for no key update skip locked
      ) p
     where q.endpoint_id = endpoint
     limit batch
  ), gone as (
    delete from delivery_due q where q.ctid = any(array(select at from picked))
    returning q.endpoint_id, q.next_attempt_at, q.delivery_id
  )
  insert into delivery_deferred (endpoint_id, next_attempt_at, delivery_id, held)
  select g.endpoint_id, g.next_attempt_at, g.delivery_id, true from gone g;
  get diagnostics moved = row_count;
  return moved;
end
$$;

-- As in 0030, for an endpoint enabled and not resting beyond the horizon.
create or replace function herald_release_endpoint(endpoint text, batch int)
returns int
language plpgsql volatile
set enable_seqscan = off
set jit = off
as $$
declare
  released int;
begin
  -- Still open, and kept so until this transaction ends (as herald_hold_endpoint, the other way).
  perform 1 from endpoint x
   where x.id = endpoint and not x.disabled and not herald_endpoint_resting(x.id)
     for share skip locked;
  if not found then
    return 0;
  end if;
  with picked as materialized (
    select q.ctid as at, q.next_attempt_at <= now() + herald_defer_horizon() as coming
      from delivery_deferred q
      cross join lateral (
        select 1 from delivery p where p.id = q.delivery_id limit 1 for no key update skip locked
      ) p
     where q.endpoint_id = endpoint and q.held
     order by q.next_attempt_at
     limit batch
  ), gone as (
    delete from delivery_deferred q where q.ctid = any(array(select at from picked where coming))
    returning q.endpoint_id, q.next_attempt_at, q.delivery_id
  ), requeued as (
    insert into delivery_due (endpoint_id, next_attempt_at, delivery_id)
    select g.endpoint_id, g.next_attempt_at, g.delivery_id from gone g
  ), unheld as (
    update delivery_deferred q set held = false where q.ctid = any(array(select at from picked where not coming))
  )
  select count(*)::int into released from picked;
  return released;
end
$$;

-- Opens an endpoint's slot that failures or a Retry-After closed, for an operator who asks for a
-- send now (a resend, a recovery, an enable), and releases the rows its rest held. A throttle's
-- spacing, at most a second, stays. Returns how many rows were released.
--
-- It locks the slot every time, not only when its snapshot sees a rest: so it waits for an outcome
-- write of the endpoint under way, and then reads the slot that write left, lifting a rest that
-- write started. Not when the caller holds the endpoint's row (`holds_endpoint`: an enable): an
-- outcome write locks the slot, then the endpoint, and waiting for the slot would deadlock with
-- it; then a slot locked meanwhile — by an outcome write, or for a moment by tending clearing its
-- mark — is left, and its rest stands.
create function herald_lift_endpoint_pause(endpoint text, holds_endpoint boolean)
returns int
language plpgsql volatile
set jit = off
as $$
begin
  if holds_endpoint then
    perform 1 from delivery_lease l where l.endpoint_id = endpoint for update skip locked;
  end if;
  if not holds_endpoint or found then
    -- A marked rest is marked as ended now, for tending to release what a hold beside this one held.
    update delivery_lease s
       set next_start_at = case when s.next_start_at > now() + interval '1 second' then now() else s.next_start_at end,
           rests_until = case when s.rests_until is not null then now() end
     where s.endpoint_id = endpoint;
  end if;
  return herald_release_endpoint(endpoint, 10000);
end
$$;

-- As in 0030, with resting endpoints closed as disabled ones are: their rows coming due are held,
-- their due rows too, and their held rows are released once their rest ends within the horizon.
create or replace function herald_tend_deferred(batch int, release_held boolean)
returns table (requeued int, held int, released int, tended boolean)
language plpgsql volatile
set enable_seqscan = off
set enable_hashjoin = off
set enable_mergejoin = off
set jit = off
as $$
declare
  e record;
begin
  requeued := 0;
  held := 0;
  released := 0;
  tended := pg_try_advisory_xact_lock(hashtext('herald_tend_deferred'));
  if not tended then
    return next;
    return;
  end if;

  with coming as materialized (
    select q.ctid as at, x.closed
      from delivery_deferred q
      cross join lateral (
        select 1 from delivery p where p.id = q.delivery_id limit 1 for no key update skip locked
      ) p
      -- The endpoint as it is, kept so until this transaction ends: a disable, enable or lift under
      -- way leaves its rows for the next tending.
      cross join lateral (
        select x.disabled or herald_endpoint_resting(x.id) as closed
          from endpoint x where x.id = q.endpoint_id limit 1 for share skip locked
      ) x
     where not q.held and q.next_attempt_at <= now() + herald_defer_horizon()
     order by q.next_attempt_at
     limit batch
  ), gone as (
    delete from delivery_deferred q where q.ctid = any(array(select at from coming where not closed))
    returning q.endpoint_id, q.next_attempt_at, q.delivery_id
  ), back as (
    insert into delivery_due (endpoint_id, next_attempt_at, delivery_id)
    select g.endpoint_id, g.next_attempt_at, g.delivery_id from gone g
    returning 1
  ), holding as (
    update delivery_deferred q set held = true where q.ctid = any(array(select at from coming where closed))
    returning 1
  )
  select (select count(*) from back), (select count(*) from holding) into requeued, held;

  -- A resting endpoint with more than 1,000 due rows stays in the walk for this rest: its mark goes,
  -- so that tending does not count its rows again at every pass (~90 µs each). Its rows that were
  -- held before, the walk over held rows releases as the rest ends.
  update delivery_lease s set rests_until = null
   where s.ctid = any(array(
     select l.ctid from delivery_lease l
      where l.rests_until > now() + herald_defer_horizon()
        and exists (select 1 from delivery_due q where q.endpoint_id = l.endpoint_id offset 1000)
        for update skip locked));

  for e in
    select x.id from endpoint x
     where x.disabled and exists (select 1 from delivery_due q where q.endpoint_id = x.id)
    union
    -- Resting beyond the horizon, with a backlog small enough to be worth moving (at the head).
    select s.endpoint_id from delivery_lease s
     where s.rests_until > now() + herald_defer_horizon() and s.next_start_at > now() + herald_defer_horizon()
       and exists (select 1 from delivery_due q where q.endpoint_id = s.endpoint_id)
       and not exists (select 1 from delivery_due q where q.endpoint_id = s.endpoint_id offset 1000)
    order by 1
  loop
    exit when held >= batch;
    held := held + herald_hold_endpoint(e.id, batch - held);
  end loop;

  -- Rests ending within the horizon, or lifted: their endpoints' rows come back before the slot
  -- opens. A mark a minute past is cleared; the walk over held rows below releases what one left.
  for e in
    select s.endpoint_id as id from delivery_lease s
     where s.rests_until > now() - interval '1 minute' and s.rests_until <= now() + herald_defer_horizon()
       and exists (select 1 from delivery_deferred q where q.endpoint_id = s.endpoint_id and q.held)
     order by s.endpoint_id
  loop
    exit when released >= batch;
    released := released + herald_release_endpoint(e.id, batch - released);
  end loop;
  -- Never waiting for a slot: an outcome write holds its slot, then waits for the endpoint that the
  -- first step holds shared.
  update delivery_lease s set rests_until = null
   where s.ctid = any(array(
     select l.ctid from delivery_lease l where l.rests_until < now() - interval '1 minute' for update skip locked));

  if release_held then
    for e in
      with recursive holding_endpoints(id) as (
        (select q.endpoint_id from delivery_deferred q where q.held order by q.endpoint_id limit 1)
        union all
        select (select q.endpoint_id from delivery_deferred q where q.held and q.endpoint_id > h.id
                 order by q.endpoint_id limit 1)
          from holding_endpoints h where h.id is not null
      )
      select h.id from holding_endpoints h
       where h.id is not null
         and exists (select 1 from endpoint x where x.id = h.id and not x.disabled)
         and not herald_endpoint_resting(h.id)
    loop
      exit when released >= batch;
      released := released + herald_release_endpoint(e.id, batch - released);
    end loop;
  end if;
  return next;
end
$$;

-- As in 0032, with a rest beyond the horizon marked on the slot.
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
              x.credentials_rejected, x.endpoint_at_fault, x.pause_steps, x.retry_after
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
           'pause_steps', c.pause_steps, 'retry_after', c.retry_after)
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
      endpoint_at_fault boolean, pause_steps double precision[], retry_after double precision)
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
      if pause > 0 then
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
