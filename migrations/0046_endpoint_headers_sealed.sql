-- An endpoint's own headers are sealed under the master key (crypto/sealed-headers.ts): the column
-- holds {} or the sealed set as a base64 string, which only a build that opens it may read. So it
-- is renamed, and the claim's result column with it: a process of a build before this one (a
-- rolling deploy, a rollback) would have sent the sealed string's characters as headers, and the
-- receiver's refusals would have disabled the endpoint; now its claims and its reads of endpoints
-- fail, naming the column it lacks, and it sends nothing. Headers an earlier build wrote in clear
-- stay as they are until a process holding the master key starts and seals them
-- (db/clear-headers.ts).
--
-- herald_claim as 0044 defined it and herald_record_and_claim as 0028 did, but for the column's name.

alter table endpoint rename column headers to sealed_headers;

drop function herald_record_and_claim(jsonb, int, int, interval, text, uuid, boolean);
drop function herald_claim(int, interval, text, uuid, boolean);

create function herald_claim(
  batch int, lease interval, after_endpoint text, claim uuid default null, share_payloads boolean default false
)
returns table (
  delivery_id text, attempt_id text, lease_token uuid, lease_expires_at timestamptz,
  app_id text, message_id text, endpoint_id text, cycle int, attempts_in_cycle int,
  trigger text, url text, sealed_headers jsonb, secret_version int, idempotent boolean, client_error_policy text,
  event_type text, payload text, message_created_at timestamptz, business_key text,
  payload_shared boolean, next_start_at timestamptz
)
language plpgsql volatile
set jit = off
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
           -- A pre-filter on this statement's snapshot; the decision is statement 2's. A throttled
           -- endpoint's slot is closed until its next start, as if it were in flight.
           and not exists (select 1 from delivery_lease s
                            where s.endpoint_id = e.id and (s.delivery_id is not null or s.next_start_at > now()))
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
    select p.id, p.due, e.url, e.sealed_headers, e.secret_version, e.idempotent, e.client_error_policy, e.throttle_rate
      from unnest(locked) as l(id)
      cross join lateral (
        select e.url, e.sealed_headers, e.secret_version, e.idempotent, e.client_error_policy, e.throttle_rate
          from endpoint e where e.id = l.id limit 1
      ) e
      cross join lateral (
        select p.id, q.ctid as due
          from delivery_due q join delivery p on p.id = q.delivery_id
         where q.endpoint_id = l.id and q.next_attempt_at <= now()
           and not exists (select 1 from delivery_lease s
                            where s.endpoint_id = l.id and (s.delivery_id is not null or s.next_start_at > now()))
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
              picked.url, picked.sealed_headers, picked.secret_version, picked.idempotent, picked.client_error_policy,
              -- A throttled endpoint (throttleRate requests a second) starts its next request no
              -- sooner than this one's start plus 1 / throttleRate.
              case when picked.throttle_rate > 0 then now() + make_interval(secs => 1.0 / picked.throttle_rate) end
                as next_start_at
  ), started as (
    insert into attempt (id, app_id, delivery_id, message_id, endpoint_id, cycle, lease_token, trigger, url,
                         claim_id)
    select d.attempt_id, d.app_id, d.id, d.message_id, d.endpoint_id, d.cycle, d.lease_token, d.trigger, d.url, claim
      from leased d
  ), in_flight as (
    insert into delivery_lease (endpoint_id, delivery_id, lease_expires_at, next_start_at)
    select d.endpoint_id, d.id, d.lease_expires_at, d.next_start_at from leased d
    on conflict on constraint delivery_one_in_flight do update
      set delivery_id = excluded.delivery_id, lease_expires_at = excluded.lease_expires_at,
          next_start_at = excluded.next_start_at
      where delivery_lease.delivery_id is null
        and (delivery_lease.next_start_at is null or delivery_lease.next_start_at <= now())
    returning 1
  )
  select d.id, d.attempt_id, d.lease_token, d.lease_expires_at, d.app_id, d.message_id, d.endpoint_id, d.cycle,
         d.attempts_in_cycle, d.trigger, d.url, d.sealed_headers, d.secret_version, d.idempotent,
         d.client_error_policy, m.event_type,
         -- Shared: each message's payload on its first row only; the rows after it say so.
         case when share_payloads and row_number() over first_of_message > 1 then null else m.payload end,
         m.created_at, m.business_key,
         share_payloads and row_number() over first_of_message > 1, d.next_start_at
    from leased d
    cross join lateral (
      select m.event_type,
             -- Past its retention, though the job that removes it (each minute) has not run yet.
             case when m.payload_expires_at <= now() then null else m.payload end as payload,
             m.created_at, m.business_key
        from message m where m.id = d.message_id limit 1
    ) m
   where herald_one_in_flight((select count(*) from in_flight), (select count(*) from leased))
  -- In the result's own order (below): a message's first row in it is the one with the payload.
  window first_of_message as (partition by d.message_id order by d.endpoint_id <= after_endpoint, d.endpoint_id)
   -- Round-robin order: the caller continues after the last endpoint returned.
   order by d.endpoint_id <= after_endpoint, d.endpoint_id;
end
$$;

-- As in 0028, with the column's new name.
create function herald_record_and_claim(
  items jsonb, disable_after int, batch int, lease interval, after_endpoint text, claim uuid default null,
  share_payloads boolean default false
)
returns table (
  recorded_delivery_id text, recorded boolean, endpoint_disabled boolean,
  delivery_id text, attempt_id text, lease_token uuid, lease_expires_at timestamptz,
  app_id text, message_id text, endpoint_id text, cycle int, attempts_in_cycle int,
  trigger text, url text, sealed_headers jsonb, secret_version int, idempotent boolean, client_error_policy text,
  event_type text, payload text, message_created_at timestamptz, business_key text, payload_shared boolean,
  next_start_at timestamptz
)
language plpgsql volatile
as $$
begin
  perform pg_advisory_xact_lock_shared(hashtext('herald_claim'), hashtext(claim::text));
  return query
  select r.delivery_id, r.recorded, r.endpoint_disabled,
         null::text, null::text, null::uuid, null::timestamptz, null::text, null::text, null::text,
         null::int, null::int, null::text, null::text, null::jsonb, null::int, null::boolean, null::text,
         null::text, null::text, null::timestamptz, null::text, null::boolean, null::timestamptz
    from herald_record_outcomes(items, disable_after) r;
  return query
  select null::text, null::boolean, null::boolean, c.*
    from herald_claim(batch, lease, after_endpoint, claim, share_payloads) c;
end
$$;
