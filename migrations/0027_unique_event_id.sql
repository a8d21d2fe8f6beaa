-- An eventId names one message of its app, as in Svix: a second publish with it is refused (409),
-- where it was stored as another message, delivered again, and the eventId then named the newer
-- one only. The index that finds a message by its eventId (0022) becomes unique, and the publish
-- function answers an item whose eventId is taken with the message that holds it.
--
-- A database where messages of one app already share an eventId cannot take the unique index:
-- the migration stops and names one, for the operator to decide (clear the eventId of the older
-- ones: `update message set event_id = null where id = any(...)`) before migrating again.
do $$
declare
  shared record;
begin
  select app_id, event_id, count(*) as n into shared
    from message where event_id is not null
   group by app_id, event_id having count(*) > 1 limit 1;
  if found then
    raise exception 'messages of app % share the eventId % (% messages): an eventId must name one message of its app',
      shared.app_id, shared.event_id, shared.n
      using hint = 'list them with: select app_id, event_id, array_agg(id order by id) from message where event_id is not null group by 1, 2 having count(*) > 1; set event_id to null on all but one of each, then migrate again';
  end if;
end
$$;

-- Built in the migration's transaction: publishes wait for it, readers do not.
create unique index message_app_event_id_key on message (app_id, event_id) where event_id is not null;
drop index message_event_id_idx;

-- The result gains a column, which `create or replace` cannot add: the function is made anew
-- (herald_record_receipts calls it by name, and reads columns that stay as they were).
drop function herald_publish_messages(jsonb, boolean);

create function herald_publish_messages(items jsonb, wake boolean)
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
