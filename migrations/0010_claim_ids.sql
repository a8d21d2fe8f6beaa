-- A claim's answer can be lost after the claim committed (the connection dropped on its way
-- back): its worker never saw those leases and sent none of their requests. Lease recovery could
-- only call their attempts `unknown`, after the lease, and park the deliveries of endpoints with no
-- idempotency contract as failed. Each claim now carries an id its worker chooses, kept on the
-- attempts it started; a worker whose claim call failed gives that claim's leases back, unsent
-- (herald_release_claim). Before this, claims carried no id: their attempts keep a null one.
--
-- A claim may still be running on the server when its worker gives up on it (a client-side
-- timeout, a connection broken only on the client's side). While it runs it holds a shared
-- advisory lock on its id, which the release takes exclusively: the release waits for the claim to
-- commit or roll back, and then finds what it committed. (The two-key form keeps these locks apart
-- from herald's others; the lock functions are strict: a claim with no id takes none.)
alter table attempt add column claim_id uuid;

drop function herald_record_and_claim(jsonb, int, int, interval, text);
drop function herald_claim(int, interval, text);
drop function herald_release_unsent(uuid);

-- As in 0004, under the claim's lock, with the claim's id on every attempt it starts.
create function herald_claim(batch int, lease interval, after_endpoint text, claim uuid default null)
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
  perform pg_advisory_xact_lock_shared(hashtext('herald_claim'), hashtext(claim::text));
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
    insert into attempt (app_id, delivery_id, message_id, endpoint_id, cycle, lease_token, trigger, url,
                         claim_id)
    select d.app_id, d.id, d.message_id, d.endpoint_id, d.cycle, d.lease_token, d.trigger, e.url, claim
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

-- As in 0007, under the claim's lock from its start: the outcomes it records come first, and a
-- give-back must wait for them too (herald_claim takes the same shared lock again; harmless).
create function herald_record_and_claim(
  items jsonb, disable_after int, batch int, lease interval, after_endpoint text, claim uuid default null
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
  perform pg_advisory_xact_lock_shared(hashtext('herald_claim'), hashtext(claim::text));
  return query
  select r.delivery_id, r.recorded, r.endpoint_disabled,
         null::text, null::text, null::uuid, null::timestamptz, null::text, null::text, null::text,
         null::int, null::int, null::text, null::text, null::jsonb, null::int, null::boolean, null::text,
         null::text, null::text, null::timestamptz, null::text
    from herald_record_outcomes(items, disable_after) r;
  return query
  select null::text, null::boolean, null::boolean, c.*
    from herald_claim(batch, lease, after_endpoint, claim) c;
end
$$;

-- The outcome write (as in 0004) finds each delivery by its id and fences on the lease token
-- alone. It matched the state too, which let the plan it keeps per connection walk the index of
-- deliveries in flight (every lease of every worker) for each item.
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


-- Give back a lease whose attempt was never sent (as in 0002, which matched the token and the
-- state only: a walk of every lease in flight for each call). The delivery is found by its id;
-- the token is the fencing. The delivery is due again with its budget untouched and the attempt
-- row, which never happened, is removed. Zero rows: recovery took the lease already.
create function herald_release_unsent(token uuid, delivery text)
returns boolean
language sql volatile as $$
  with released as (
    update delivery d
       set state = 'pending', next_attempt_at = now(), lease_token = null, lease_expires_at = null,
           attempts_in_cycle = d.attempts_in_cycle - 1, attempts_total = d.attempts_total - 1,
           updated_at = now()
     where d.id = delivery and d.lease_token = token
    returning d.id
  ), forgotten as (
    delete from attempt a using released
     where a.lease_token = token and a.delivery_id = released.id and a.outcome is null
  )
  select exists (select 1 from released)
$$;

-- Give back every lease of a claim whose worker never received it, each as herald_release_unsent
-- does. Safe whenever it runs: only that worker could have sent them, and it did not. It waits
-- for the claim if that is still running; leases already recovered (or never committed) are not
-- found. Returns how many were given back. It walks the deliveries in flight once (the partial
-- index delivery_one_in_flight: at most one per busy worker slot), never the history.
create function herald_release_claim(claim uuid)
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
      from delivery d join attempt a on a.lease_token = d.lease_token
     where d.state = 'sending' and a.claim_id = claim and a.outcome is null
  loop
    if herald_release_unsent(lost.lease_token, lost.id) then
      released := released + 1;
    end if;
  end loop;
  return released;
end
$$;
