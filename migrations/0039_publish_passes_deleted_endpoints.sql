-- A publish passes by an endpoint whose deletion commits while the publish runs. Its fan-out read
-- the app's endpoints without a lock: an endpoint being deleted (its row locked by the delete) was
-- read, its delivery inserted, and the delivery's foreign key check, which waits for the delete,
-- then failed (23503 delivery_endpoint_id_fkey) — a 500 over HTTP, and in the library the abort
-- of the caller's whole transaction, where the publish is promised the endpoints subscribed at
-- its moment. The fan-out now takes the lock that check takes (FOR KEY SHARE, which endpoint
-- updates do not conflict with), and READ COMMITTED passes a row deleted meanwhile by.
--
-- Otherwise the function is 0027's.

create or replace function herald_publish_messages(items jsonb, wake boolean)
returns table (
  ord int, created boolean, id text, app_id text, event_type text, event_id text, payload text,
  channels text[], tags text[], created_at timestamptz, request_hash bytea, deliveries int,
  event_id_taken boolean
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
      -- An item whose eventId another message of its app has (or an earlier item of the batch)
      -- is not inserted either. EventIds are not taken in one order: two batches that share two
      -- of them, in opposite orders under other keys, can deadlock (40P01); the group commit then
      -- writes their items alone.
      from input order by app_id, idempotency_key, ord
    on conflict do nothing
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
        -- The lock the delivery's foreign key check takes anyway, taken here: an endpoint whose
        -- deletion commits while this waits for it is passed by, not a 23503 that aborts the
        -- publish (and a library caller's whole transaction).
        for key share of e
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
         m.tags, m.created_at, m.request_hash, coalesce(d.deliveries, 0), coalesce(m.by_event_id, false)
    from jsonb_to_recordset(items) as x(ord int, app_id text, idempotency_key text, event_id text)
    left join jsonb_to_recordset(inserted) as d(ord int, id text, deliveries int) on d.ord = x.ord
    -- Every item gets its row, even one whose earlier message vanished meanwhile (id null then).
    -- One not inserted is answered with the message holding its key (a replay, or a conflict of
    -- content) or else with the one holding its eventId (by_event_id).
    left join lateral (
      select m.*, false as by_event_id from message m where m.id = d.id
      union all
      select m.*, false from message m
       where d.id is null and m.app_id = x.app_id and m.idempotency_key = x.idempotency_key
      union all
      select m.*, true from message m
       where d.id is null and m.app_id = x.app_id and m.event_id = x.event_id
      limit 1
    ) m on true
   order by x.ord;
end
$$;

alter function herald_publish_messages(jsonb, boolean) set jit = off;
