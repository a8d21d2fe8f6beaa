-- Publishing queues its deliveries itself, as the claim and the outcome write keep theirs (0015).
--
-- The insert of a publish's deliveries fired the statement trigger that follows every other
-- writer of delivery: 13–15 µs per call, whatever the number of deliveries (a one-delivery
-- publish, in a loop of calls: 78–83 µs of database time per publish without the trigger, 93–98
-- with it). The publish now inserts their due rows in the same statement and switches the
-- trigger off for its own statements. Intake publishes through this function too.

-- As in 0011, with the due rows of the deliveries it creates.
create or replace function herald_publish_messages(items jsonb, wake boolean)
returns table (
  ord int, created boolean, id text, app_id text, event_type text, event_id text, payload text,
  channels text[], tags text[], created_at timestamptz, request_hash bytea, deliveries int
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
