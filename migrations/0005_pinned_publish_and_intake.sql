-- Publishing and the recording of inbound receipts, as functions with pinned plans.
--
-- Both ran as top-level prepared statements. After a few executions PostgreSQL keeps a generic
-- plan for a prepared statement, made for the 100 rows it assumes jsonb_to_recordset returns: a
-- hash join over a sequential scan of `endpoint` — every endpoint of every application read on
-- each publish — and of `intake` and `message` on each batch of receipts, for as long as the
-- connection lived. As in 0004, these functions keep one generic plan per connection and are told
-- its shape: index lookups and nested loops. (test/plan-shape.test.ts)

-- A claim may name the message it is about to publish, which exists only once the same
-- transaction has inserted it: checked at COMMIT, not per statement.
alter table intake alter constraint intake_message_id_fkey deferrable initially deferred;

-- Publish messages: each with its deliveries (one per endpoint of the app subscribed at this
-- moment — disabled ones included: their deliveries wait — or only `only_endpoint_id`'s whatever
-- its filters, for Svix's send-example) and its audit entry, each with its own idempotency
-- outcome. Items: a JSON array of {ord, id (null: a new one), app_id, event_type, event_id,
-- payload, channels, tags, idempotency_key, request_hash (hex), retention_days, business_key,
-- only_endpoint_id, actor}. One row per item: created = true with the new message and its number
-- of deliveries, or false with the message that already holds its idempotency key (found on a
-- fresh snapshot, so one that a concurrent publisher committed while this insert waited for it is
-- found too) and that message's request_hash, for the caller to tell a replay from a conflict
-- (a null id: that message was deleted meanwhile). `wake`: NOTIFY the workers at commit when any
-- delivery was created.
create function herald_publish_messages(items jsonb, wake boolean)
returns table (
  ord int, created boolean, id text, app_id text, event_type text, event_id text, payload text,
  channels text[], tags text[], created_at timestamptz, request_hash bytea, deliveries int
)
language plpgsql volatile
set plan_cache_mode = force_generic_plan
set enable_seqscan = off
set enable_hashjoin = off
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
      from msg join input i on i.new_id = msg.id join endpoint e on e.app_id = i.app_id
     where case when i.only_endpoint_id is not null then e.id = i.only_endpoint_id
                else (e.filter_types is null or i.event_type = any(e.filter_types))
                     and (e.channels is null or e.channels && coalesce(i.channels, '{}')) end
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

-- Record a batch of inbound receipts: claim each delivery id (its first receipt in the batch does;
-- an id claimed before makes a duplicate), publish the relayed message of each new claim (its
-- idempotency key is the business key: another delivery id carrying the same business event
-- joins the message the first one produced), and observe every receipt. Items: a JSON array of
-- {ord, source_id, delivery_id, business_key, digest (hex SHA-256 of the body), idempotency_key,
-- request_hash (hex), payload, actor}. Where a claim's message goes — the app, the event type, the
-- retention (the source's, else the app's, else default_retention_days) — is read from the source
-- row here, never from a caller's copy. Every statement takes a fresh snapshot, so a claim or a
-- message that a concurrent batch committed while this one waited for it is seen. A receipt whose
-- source is gone fails the call (its observation would have no claim).
create function herald_record_receipts(items jsonb, default_retention_days int)
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
      from input i join source s on s.id = i.source_id join app a on a.id = s.app_id
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
      left join intake c on c.source_id = x.source_id and c.delivery_id = x.delivery_id
      left join jsonb_to_recordset(claims) as m(ord int, intake_id text) on m.intake_id = c.id
      left join jsonb_to_recordset(published) as p(ord int, created boolean) on p.ord = m.ord
  ), observed as (
    insert into intake_observation (intake_id, app_id, duplicate, body_sha256)
    select o.intake_id, o.app_id, not o.claimed, decode(o.digest, 'hex') from outcome o
  )
  select o.ord, o.intake_id, o.claimed, o.message_id, o.relayed from outcome o order by o.ord;
end
$$;
