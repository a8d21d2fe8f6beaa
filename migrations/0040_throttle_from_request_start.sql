-- A throttled endpoint's requests are spaced from when each left, not only from its claim. The
-- claim writes on the endpoint's slot when the next request may start (its now() plus
-- 1 / throttleRate); but a request can wait in the worker for a connection to its origin (many
-- endpoints sharing few connections) until well past that, and the outcome write then emptied the
-- slot with the start long passed: the next claim took the endpoint at once, and two requests left
-- a few milliseconds apart. The outcome write now moves the next start to at least the request's
-- own start plus the spacing. The start is taken as the write's now() less the request's duration:
-- the write begins after the answer came, so that is no earlier than the request left; and the
-- worker, which comes back for the endpoint at the spacing after its own reading of the same
-- (once the write has answered), finds the slot open by then.
--
-- Otherwise herald_record_outcomes is 0036's.

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
    -- By key, not by tuple id: see 0036. A throttled endpoint's next start counts from when this
    -- request left — the write's now() less its duration — as well as from its claim: a request
    -- that waited for its origin's connection left long after the claim's spacing ran out.
    update delivery_lease l
       set delivery_id = null, lease_expires_at = null,
           next_start_at = case when e.throttle_rate > 0
                                then greatest(l.next_start_at,
                                              now()
                                                - make_interval(secs => coalesce(c.duration_ms, 0) / 1000.0)
                                                + make_interval(secs => 1.0 / e.throttle_rate))
                                else l.next_start_at end
      from closed c join endpoint e on e.id = c.endpoint_id
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
