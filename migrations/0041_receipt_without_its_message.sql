-- An inbound claim whose business key's message was deleted while the claim joined it is refused
-- (40001), not acknowledged without a message. herald_publish_messages answers such an item with
-- no id (its key was taken when it inserted, and its holder gone when it read it back: history
-- retention committed in between); the claim was then left without its message, its sender told
-- 2xx, and every redelivery taken for a duplicate — an event acknowledged and never relayed. The
-- group commit writes the receipts of a refused batch alone, and by then the key is free; a
-- receipt refused alone is answered 503, and its sender delivers it again.
--
-- Otherwise as in 0011, with 0017's jit = off and 0038's lock_timeout = 2s, which a replaced
-- function takes from its own definition.

create or replace function herald_record_receipts(items jsonb, default_retention_days int)
returns table (ord int, intake_id text, claimed boolean, message_id text, relayed boolean)
language plpgsql volatile
set plan_cache_mode = force_generic_plan
set enable_seqscan = off
set enable_hashjoin = off
set enable_mergejoin = off
set jit = off
set lock_timeout = '2s'
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

  -- 2b. A claim whose business key had a message that was deleted (history retention) between the
  --     insert that found the key taken and the read of its holder has no message to join: joined
  --     to nothing, its receipt would be acknowledged and never relayed, and every redelivery of
  --     it taken for a duplicate. The batch is refused as a serialization failure instead, which
  --     the group commit answers by writing its receipts alone — by then the key is free.
  if exists (select 1 from jsonb_to_recordset(published) as p(id text) where p.id is null) then
    raise exception 'the message holding a business key was deleted while a claim joined it'
      using errcode = '40001';
  end if;

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
