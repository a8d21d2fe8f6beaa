-- A cheaper claim and outcome write, same behaviour.
--
-- The claim (as in 0010) checked "no delivery of this endpoint in flight" by reading every lease in
-- flight, of every worker, once per claim and comparing each endpoint of the batch with all of
-- them; it joined the attempts it had just started back to their leases by token (both quadratic
-- under the pinned nested loops) and looked each endpoint up twice. Its first statement tested
-- "has due work" with a bitmap scan (index, then heap) where an index scan stops at the first
-- entry. Serial loop, 128 per claim, 500 leases of another worker in flight: 118–122 → 74–77 µs
-- per claimed row (256 per claim, none in flight: 87–99 → 64–74).
--
-- The outcome write answered "was this item's lease ended?" with `= any(array)` over the batch's
-- ended ids: quadratic in a batch of up to 500. It asks a jsonb object, keyed by delivery id.
--
-- Publishing (as in 0005) joined its messages to the endpoint table: a plan cached while that
-- table was small read every endpoint of every app for each publish, until the next ANALYZE. The
-- endpoints of each message's app are now looked up by the app's id, whatever the plan. Recording
-- receipts (as in 0005) could read its sources, their apps and every claim ever made the same
-- way: each is now looked up by its key.
--
-- Each lookup that must stay one is a LATERAL subquery with LIMIT (or OFFSET 0), which the planner
-- never flattens into a join. test/plan-shape.test.ts fails on a hot table's index read whole.

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
  -- Each lookup by key is a LATERAL subquery with LIMIT, which the planner never flattens into a
  -- join: one index lookup per lease, whatever the sizes the cached plan was made for.
  with picked as (
    select p.id, e.url, e.headers, e.secret_version, e.idempotent, e.client_error_policy
      from unnest(locked) as l(id)
      cross join lateral (
        select e.url, e.headers, e.secret_version, e.idempotent, e.client_error_policy
          from endpoint e where e.id = l.id limit 1
      ) e
      cross join lateral (
        select p.id from delivery p
         where p.endpoint_id = l.id and p.state = 'pending' and p.next_attempt_at <= now()
           and not exists (select 1 from delivery s where s.endpoint_id = l.id and s.state = 'sending')
         order by p.next_attempt_at limit 1
         for update skip locked
      ) p
  ), leased as (
    update delivery u
       set state = 'sending', lease_token = gen_random_uuid(), lease_expires_at = now() + lease,
           next_attempt_at = null,
           attempts_in_cycle = u.attempts_in_cycle + 1, attempts_total = u.attempts_total + 1,
           updated_at = now()
      from picked
     where u.id = picked.id
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
  )
  select d.id, d.attempt_id, d.lease_token, d.lease_expires_at, d.app_id, d.message_id, d.endpoint_id, d.cycle,
         d.attempts_in_cycle, d.trigger, d.url, d.headers, d.secret_version, d.idempotent,
         d.client_error_policy, m.event_type, m.payload, m.created_at, m.business_key
    from leased d
    cross join lateral (
      select m.event_type, m.payload, m.created_at, m.business_key from message m where m.id = d.message_id limit 1
    ) m
   -- Round-robin order: the caller continues after the last endpoint returned.
   order by d.endpoint_id <= after_endpoint, d.endpoint_id;
end
$$;

-- As in 0010, asking a jsonb object of the ended ids instead of scanning an array per item.
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
     where a.lease_token = c.lease_token
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
                            where a.lease_token = x.lease_token and a.outcome = x.outcome
                              and a.response_class is not distinct from x.response_class) end,
         x.delivery_id = any(disabled_by)
    from jsonb_to_recordset(items) as x(delivery_id text, lease_token uuid, outcome text, response_class text);
end
$$;

-- As in 0005, each message's endpoints looked up by its app's id, and hash joins allowed: besides
-- those lookups (LATERAL, by key), the function joins only its own sets of the batch (input,
-- inserted messages, counts), which nested loops compared pairwise: at a batch of 256 that cost
-- more than the inserts (307 → 173 µs per message, serial).
create or replace function herald_publish_messages(items jsonb, wake boolean)
returns table (
  ord int, created boolean, id text, app_id text, event_type text, event_id text, payload text,
  channels text[], tags text[], created_at timestamptz, request_hash bytea, deliveries int
)
language plpgsql volatile
set plan_cache_mode = force_generic_plan
set enable_seqscan = off
set enable_mergejoin = off
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
    returning delivery.message_id
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

-- As in 0005, each source (with its app) and each claim looked up by its key.
create or replace function herald_record_receipts(items jsonb, default_retention_days int)
returns table (ord int, intake_id text, claimed boolean, message_id text, relayed boolean)
language plpgsql volatile
set plan_cache_mode = force_generic_plan
set enable_seqscan = off
set enable_hashjoin = off
set enable_mergejoin = off
as $$
#variable_conflict use_column
declare
  claims jsonb;
  published jsonb;
begin
  -- 1. The claims, each already naming the message it is about to publish (the foreign key is
  --    checked at commit). Delivery-id order: concurrent batches cannot deadlock on each other.
  with input as materialized (
    select x.*, herald_id('msg') as new_id
      from jsonb_to_recordset(items) as x(
        ord int, source_id text, delivery_id text, business_key text, digest text,
        idempotency_key text, request_hash text, payload text, actor text)
  ), firsts as (
    select distinct on (i.source_id, i.delivery_id) i.*, s.app_id, s.event_type,
           coalesce(s.retention_days, a.retention_days, default_retention_days) as retention_days
      from input i
      cross join lateral (
        select s.app_id, s.event_type, s.retention_days from source s where s.id = i.source_id limit 1
      ) s
      cross join lateral (select a.retention_days from app a where a.id = s.app_id limit 1) a
     order by i.source_id, i.delivery_id, i.ord
  ), claimed as (
    insert into intake (source_id, app_id, delivery_id, business_key, body_sha256, message_id)
    select f.source_id, f.app_id, f.delivery_id, f.business_key, decode(f.digest, 'hex'), f.new_id
      from firsts f order by f.source_id, f.delivery_id
    on conflict (source_id, delivery_id) do nothing
    returning intake.id, intake.source_id, intake.delivery_id
  )
  select coalesce(jsonb_agg(jsonb_build_object(
           'ord', f.ord, 'intake_id', c.id, 'id', f.new_id, 'app_id', f.app_id, 'event_type', f.event_type,
           'payload', f.payload, 'idempotency_key', f.idempotency_key, 'request_hash', f.request_hash,
           'retention_days', f.retention_days, 'business_key', f.business_key, 'actor', f.actor)), '[]')
    into claims
    from claimed c
    join firsts f on f.source_id = c.source_id and f.delivery_id = c.delivery_id;

  -- 2. Their messages (herald_publish_messages inserts them in key order).
  select coalesce(jsonb_agg(jsonb_build_object('ord', p.ord, 'created', p.created, 'id', p.id)), '[]')
    into published
    from herald_publish_messages(claims, true) p;

  -- 3. A claim whose business key already had a message joins that message.
  update intake i set message_id = p.id
    from jsonb_to_recordset(published) as p(ord int, created boolean, id text)
    join jsonb_to_recordset(claims) as c(ord int, intake_id text) on c.ord = p.ord
   where not p.created and i.id = c.intake_id;

  -- 4. Every receipt observed, against its claim: this batch's or an earlier one.
  return query
  with outcome as materialized (
    select x.ord, x.digest, c.app_id, c.id as intake_id, c.message_id,
           coalesce(m.ord = x.ord, false) as claimed, coalesce(m.ord = x.ord and p.created, false) as relayed
      from jsonb_to_recordset(items) as x(ord int, source_id text, delivery_id text, digest text)
      left join lateral (
        select c.* from intake c where c.source_id = x.source_id and c.delivery_id = x.delivery_id limit 1
      ) c on true
      left join jsonb_to_recordset(claims) as m(ord int, intake_id text) on m.intake_id = c.id
      left join jsonb_to_recordset(published) as p(ord int, created boolean) on p.ord = m.ord
  ), observed as (
    insert into intake_observation (intake_id, app_id, duplicate, body_sha256)
    select o.intake_id, o.app_id, not o.claimed, decode(o.digest, 'hex') from outcome o
  )
  select o.ord, o.intake_id, o.claimed, o.message_id, o.relayed from outcome o order by o.ord;
end
$$;
