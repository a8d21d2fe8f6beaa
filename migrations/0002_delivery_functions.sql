-- The delivery state machine's transitions, as server-side functions so that a worker claims or
-- finishes a whole batch in one round trip. Each function is called as a single autocommit
-- statement; inside a VOLATILE plpgsql function every statement takes a fresh snapshot, which is
-- what lets a decision be made on state read *after* a lock was taken.

-- Claim up to `batch` deliveries, at most one per endpoint, round-robin over endpoints starting
-- after `after_endpoint`. For each endpoint: lock its row (SKIP LOCKED, so claimers never wait
-- on each other), then — under that lock, on a fresh snapshot — check that nothing is in flight
-- for it and lease its earliest due delivery with a new fencing token and a `started` attempt.
-- Every transition into `sending` happens under the endpoint's row lock, so the in-flight check
-- cannot be stale; the partial unique index delivery_one_in_flight backs it up regardless.
create function herald_claim(batch int, lease interval, after_endpoint text)
returns table (
  delivery_id text, attempt_id text, lease_token uuid, lease_expires_at timestamptz,
  app_id text, message_id text, endpoint_id text, cycle int, attempts_in_cycle int,
  trigger text, url text, headers jsonb, secret_version int, idempotent boolean, client_error_policy text,
  event_type text, payload text, message_created_at timestamptz, business_key text
)
language plpgsql volatile as $$
declare
  candidate text;
  claimed int := 0;
  pass int;
  lo text;
  hi text;
  d record;
  token uuid;
begin
  -- Two passes make the round robin wrap: (after_endpoint, ∞) then (-∞, after_endpoint].
  for pass in 1..2 loop
    lo := case when pass = 1 then after_endpoint else '' end;
    hi := case when pass = 1 then null else after_endpoint end;
    for candidate in
      -- Loose index scan: each step jumps to the next endpoint that has pending work, so the
      -- cost follows the number of busy endpoints, not the depth of their backlogs.
      with recursive busy(id) as (
        (select p.endpoint_id from delivery p where p.state = 'pending' and p.endpoint_id > lo
          order by p.endpoint_id limit 1)
        union all
        select (select p.endpoint_id from delivery p where p.state = 'pending' and p.endpoint_id > busy.id
                order by p.endpoint_id limit 1)
        from busy where busy.id is not null and (hi is null or busy.id <= hi)
      )
      select busy.id from busy where busy.id is not null and (hi is null or busy.id <= hi)
    loop
      perform 1 from delivery p
        where p.endpoint_id = candidate and p.state = 'pending' and p.next_attempt_at <= now() limit 1;
      continue when not found;
      perform 1 from endpoint e where e.id = candidate and not e.disabled for no key update skip locked;
      continue when not found;
      perform 1 from delivery s where s.endpoint_id = candidate and s.state = 'sending';
      continue when found;

      token := gen_random_uuid();
      update delivery u
         set state = 'sending', lease_token = token, lease_expires_at = now() + lease,
             next_attempt_at = null,
             attempts_in_cycle = u.attempts_in_cycle + 1, attempts_total = u.attempts_total + 1,
             updated_at = now()
       where u.id = (select p.id from delivery p
                      where p.endpoint_id = candidate and p.state = 'pending' and p.next_attempt_at <= now()
                      order by p.next_attempt_at limit 1 for update skip locked)
      returning u.id, u.app_id, u.message_id, u.endpoint_id, u.cycle, u.attempts_in_cycle, u.trigger,
                u.lease_expires_at
      into d;
      continue when not found;

      delivery_id := d.id; lease_token := token; lease_expires_at := d.lease_expires_at;
      app_id := d.app_id; message_id := d.message_id; endpoint_id := d.endpoint_id;
      cycle := d.cycle; attempts_in_cycle := d.attempts_in_cycle; trigger := d.trigger;
      select e.url, e.headers, e.secret_version, e.idempotent, e.client_error_policy
        into url, headers, secret_version, idempotent, client_error_policy
        from endpoint e where e.id = candidate;
      select m.event_type, m.payload, m.created_at, m.business_key
        into event_type, payload, message_created_at, business_key
        from message m where m.id = d.message_id;
      insert into attempt (app_id, delivery_id, message_id, endpoint_id, cycle, lease_token, trigger, url)
        values (d.app_id, d.id, d.message_id, d.endpoint_id, d.cycle, token, d.trigger, url)
        returning id into attempt_id;
      return next;
      claimed := claimed + 1;
      if claimed >= batch then return; end if;
    end loop;
  end loop;
end
$$;

-- Record the outcomes of finished attempts: one item per attempt, as a JSON array of
-- {delivery_id, lease_token, outcome, status_code, response_class, response_body, duration_ms,
--  next_attempt_at, disable_endpoint, credentials_rejected}. `next_attempt_at` null on a non-success means the cycle's
-- budget is spent. Fencing: a delivery is only updated when it is still `sending` under the same
-- lease token; otherwise the lease was lost (recovered, taken over) and the item reports
-- recorded = false — unless an earlier try of this same call already recorded it. Repeating a call
-- is therefore harmless.
create function herald_record_outcomes(items jsonb, disable_after int)
returns table (delivery_id text, recorded boolean, endpoint_disabled boolean)
language plpgsql volatile as $$
declare
  o record;
  ep text;
  app text;
  disabled_now boolean;
begin
  for o in
    select * from jsonb_to_recordset(items) as x(
      delivery_id text, lease_token uuid, outcome text, status_code int, response_class text,
      response_body text, duration_ms int, next_attempt_at timestamptz, disable_endpoint text,
      credentials_rejected boolean)
    -- A fixed lock order keeps concurrent batches from deadlocking on endpoint rows.
    order by x.delivery_id
  loop
    delivery_id := o.delivery_id;
    endpoint_disabled := false;
    disabled_now := false;
    update delivery u
       set state = case when o.outcome = 'success' then 'succeeded'
                        when o.next_attempt_at is null then 'failed'
                        else 'pending' end,
           next_attempt_at = case when o.outcome = 'success' then null else o.next_attempt_at end,
           lease_token = null, lease_expires_at = null, trigger = 'scheduled', updated_at = now()
     where u.id = o.delivery_id and u.state = 'sending' and u.lease_token = o.lease_token
    returning u.endpoint_id, u.app_id into ep, app;
    recorded := found;
    if not recorded then
      -- A repeat of a write whose commit succeeded but whose reply was lost finds the lease
      -- already ended by itself: that is this very outcome, recorded, not a lost lease.
      select exists (select 1 from attempt a where a.lease_token = o.lease_token and a.outcome = o.outcome
                       and a.response_class is not distinct from o.response_class)
        into recorded;
      return next;
      continue;
    end if;
    update attempt a
       set outcome = o.outcome, finished_at = now(), status_code = o.status_code,
           response_class = o.response_class, response_body = o.response_body, duration_ms = o.duration_ms
     where a.lease_token = o.lease_token;
    if o.credentials_rejected then
      update endpoint e set credentials_rejected_at = now() where e.id = ep;
    end if;
    if o.outcome = 'success' then
      update endpoint e set consecutive_failures = 0, credentials_rejected_at = null
       where e.id = ep and (e.consecutive_failures <> 0 or e.credentials_rejected_at is not null);
    elsif o.outcome = 'failure' then
      -- Only known failures count towards auto-disable; `unknown` says nothing about the endpoint.
      update endpoint e
         set consecutive_failures = e.consecutive_failures + 1,
             disabled = true,
             disabled_reason = case when o.disable_endpoint is not null then o.disable_endpoint else 'failures' end,
             updated_at = now()
       where e.id = ep and not e.disabled
         and (o.disable_endpoint is not null or e.consecutive_failures + 1 >= disable_after)
      returning true into disabled_now;
      if disabled_now then
        endpoint_disabled := true;
        -- The worker's decision is an administrative change like any other: it is audited.
        insert into audit_entry (actor, action, app_id, target_type, target_id, details)
          values ('worker', 'endpoint.disabled', app, 'endpoint', ep,
                  jsonb_build_object('reason', coalesce(o.disable_endpoint, 'failures'),
                                     'deliveryId', o.delivery_id, 'statusCode', o.status_code));
      else
        update endpoint e set consecutive_failures = e.consecutive_failures + 1 where e.id = ep;
      end if;
    end if;
    return next;
  end loop;
end
$$;

-- Give back a lease whose attempt was never sent (the worker found too little of the lease left
-- to send safely, e.g. after a long pause): the delivery is due again with its budget untouched
-- and the attempt row, which never happened, is removed. Fenced like every end of a lease; zero
-- rows means recovery already took the lease.
create function herald_release_unsent(token uuid)
returns boolean
language sql volatile as $$
  with released as (
    update delivery d
       set state = 'pending', next_attempt_at = now(), lease_token = null, lease_expires_at = null,
           attempts_in_cycle = d.attempts_in_cycle - 1, attempts_total = d.attempts_total - 1,
           updated_at = now()
     where d.lease_token = token and d.state = 'sending'
    returning d.id
  ), forgotten as (
    delete from attempt a using released
     where a.delivery_id = released.id and a.lease_token = token and a.outcome is null
  )
  select exists (select 1 from released)
$$;

-- Recover leases that expired with no recorded outcome: the attempt becomes `unknown` (nobody
-- can tell whether the receiver applied it). The delivery is due again at once — unless its cycle's
-- budget is spent, or its endpoint has no idempotency contract (a retry could apply the effect
-- twice): then it is parked as `failed` for review, as the worker does for a lost connection.
-- The conditions are re-checked on each row after it is locked, so a lease that was finished or is
-- still live in the meantime is left alone.
create function herald_recover_expired_leases(max_attempts int, batch int)
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
     where a.lease_token = released.lease_token and a.outcome is null
    returning a.id
  )
  -- `marked` runs although nothing reads it: data-modifying CTEs always execute.
  select released.id, released.endpoint_id, released.lease_token from released
$$;
