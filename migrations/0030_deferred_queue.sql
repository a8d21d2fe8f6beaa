-- Deliveries that wait long are kept out of the claims' walk.
--
-- A claim walks the endpoints that have a row in delivery_due, in id order, and steps over each
-- one whose rows are all due later or whose endpoint is disabled: ~4.3 µs each, at every claim
-- (5,000 of them: +21-25 ms a claim; docs/performance.md, "What a claim walks"). An outage of
-- many endpoints leaves exactly those: retries minutes to hours ahead, and the backlogs of the
-- endpoints it disabled. Their rows now wait in delivery_deferred:
--
--   * a pending delivery due later than now() + herald_defer_horizon() (60 s) is queued there by
--     the outcome write and by the trigger that follows every other writer (publishing queues
--     for now, in delivery_due, as before);
--   * a disabled endpoint's rows wait there `held`, whatever their time: disabling an endpoint
--     moves its due rows there, and the workers' tending moves those that a publish or a retry
--     queued for it since;
--   * the workers tend the table (herald_tend_deferred, on their maintenance clock): rows coming
--     due within the horizon go back to delivery_due (or are held, their endpoint disabled);
--     enabling an endpoint releases its held rows at once, and tending releases any that a hold
--     racing with the enable left behind.
--
-- A pending delivery's queue row is in one of the two tables; the view delivery_queued shows
-- both. Whatever moves a queue row between them first locks its delivery (SKIP LOCKED): a writer
-- of the delivery, which holds that lock, finds the queue row where the move left it, and a move
-- never meets a writer half-way.
--
-- The horizon is a setting (herald.defer_horizon, 60 s unless set) so that tests can shorten it;
-- tending runs every few seconds, well within it, so that a deferred row is back in delivery_due
-- before it is due.
--
-- Workers of the version before this migration do not tend: once it is applied, retries more than
-- a minute ahead and disabled endpoints' backlogs wait until a worker of this version runs.
-- Upgrade the workers with it.

create table delivery_deferred (
  endpoint_id     text collate "C" not null,
  next_attempt_at timestamptz not null,
  delivery_id     text collate "C" not null,
  -- Its endpoint is disabled: it waits, whatever its time, until the endpoint is enabled.
  held            boolean not null default false,
  primary key (endpoint_id, next_attempt_at, delivery_id)
);
-- What tending reads: rows coming due, in time order; and the endpoints with held rows.
create index delivery_deferred_coming on delivery_deferred (next_attempt_at) where not held;
create index delivery_deferred_held on delivery_deferred (endpoint_id) where held;
-- The disabled endpoints, for tending to find those with rows in delivery_due.
create index endpoint_disabled_idx on endpoint (id) where disabled;

create function herald_defer_horizon()
returns interval
language sql stable
as $$
  select coalesce(nullif(current_setting('herald.defer_horizon', true), '')::interval, interval '60 seconds')
$$;

-- Every pending delivery's queue row, wherever it waits.
create view delivery_queued as
  select endpoint_id, next_attempt_at, delivery_id, false as held from delivery_due
  union all
  select endpoint_id, next_attempt_at, delivery_id, held from delivery_deferred;

-- Rows already waiting far ahead, or for a disabled endpoint, move now: in one statement, each
-- under its delivery's lock as every later move (a row deleted meanwhile by a writer is not
-- copied). Those of deliveries a writer holds stay in delivery_due, where they are served as
-- before: tending holds a disabled endpoint's, and a far one is claimed when it comes due.
with moved as (
  delete from delivery_due q
   using endpoint e
   where e.id = q.endpoint_id
     and (e.disabled or q.next_attempt_at > now() + herald_defer_horizon())
     and exists (select 1 from delivery p where p.id = q.delivery_id for no key update skip locked)
  returning q.endpoint_id, q.next_attempt_at, q.delivery_id, e.disabled
)
insert into delivery_deferred (endpoint_id, next_attempt_at, delivery_id, held)
select m.endpoint_id, m.next_attempt_at, m.delivery_id, m.disabled from moved m;

-- As in 0015, with each pending row queued by its time, and looked for in both tables.
create or replace function herald_follow_deliveries()
returns trigger
language plpgsql
set enable_seqscan = off
set enable_hashjoin = off
set enable_mergejoin = off
set jit = off
as $$
declare
  filled boolean;
begin
  -- The claim and the outcome write keep the queue tables themselves, in their own statements.
  if current_setting('herald.queue_kept', true) = 'on' then
    return null;
  end if;
  if tg_op in ('UPDATE', 'DELETE') then
    with left_due as (
      delete from delivery_due q where q.ctid = any(array(
        select k.ctid from old_rows o
         cross join lateral (
           select q.ctid from delivery_due q
            where q.endpoint_id = o.endpoint_id and q.next_attempt_at = o.next_attempt_at and q.delivery_id = o.id
            limit 1
         ) k
         where o.state = 'pending'))
    ), left_deferred as (
      delete from delivery_deferred q where q.ctid = any(array(
        select k.ctid from old_rows o
         cross join lateral (
           select q.ctid from delivery_deferred q
            where q.endpoint_id = o.endpoint_id and q.next_attempt_at = o.next_attempt_at and q.delivery_id = o.id
            limit 1
         ) k
         where o.state = 'pending'))
    ), left_lease as (
      update delivery_lease l set delivery_id = null, lease_expires_at = null
       where l.ctid = any(array(
         select k.ctid from old_rows o
          cross join lateral (
            select l.ctid from delivery_lease l where l.endpoint_id = o.endpoint_id and l.delivery_id = o.id limit 1
          ) k
          where o.state = 'sending'))
    )
    delete from delivery_failed f where f.ctid = any(array(
      select k.ctid from old_rows o
       cross join lateral (
         select f.ctid from delivery_failed f where f.endpoint_id = o.endpoint_id and f.delivery_id = o.id limit 1
       ) k
       where o.state = 'failed'));
  end if;
  if tg_op in ('INSERT', 'UPDATE') then
    if exists (select 1 from new_rows n where n.state = 'sending' group by n.endpoint_id having count(*) > 1) then
      perform herald_one_in_flight(0, 1);
    end if;
    with entered_due as (
      insert into delivery_due (endpoint_id, next_attempt_at, delivery_id)
      select n.endpoint_id, n.next_attempt_at, n.id from new_rows n
       where n.state = 'pending' and n.next_attempt_at <= now() + herald_defer_horizon()
    ), entered_deferred as (
      insert into delivery_deferred (endpoint_id, next_attempt_at, delivery_id)
      select n.endpoint_id, n.next_attempt_at, n.id from new_rows n
       where n.state = 'pending' and n.next_attempt_at > now() + herald_defer_horizon()
    ), entered_failed as (
      insert into delivery_failed (endpoint_id, delivery_id)
      select n.endpoint_id, n.id from new_rows n where n.state = 'failed'
    ), entered_lease as (
      insert into delivery_lease (endpoint_id, delivery_id, lease_expires_at)
      select n.endpoint_id, n.id, n.lease_expires_at from new_rows n where n.state = 'sending'
      on conflict on constraint delivery_one_in_flight do update
        set delivery_id = excluded.delivery_id, lease_expires_at = excluded.lease_expires_at
        where delivery_lease.delivery_id is null
      returning 1
    )
    select herald_one_in_flight((select count(*) from entered_lease),
                                (select count(*) from new_rows n where n.state = 'sending'))
      into filled;
  end if;
  return null;
end
$$;


-- As in 0024, with each retry queued by its time.
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
begin
  -- End every lease still held, and finish its attempt, in one statement.
  with x as (
    select * from jsonb_to_recordset(items) as x(
      delivery_id text, lease_token uuid, outcome text, status_code int, response_class text,
      response_body text, duration_ms int, next_attempt_at timestamptz, disable_endpoint text,
      credentials_rejected boolean, endpoint_at_fault boolean)
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
              x.credentials_rejected, x.endpoint_at_fault
  ), finished as (
    update attempt a
       set outcome = c.outcome, finished_at = now(), status_code = c.status_code,
           response_class = c.response_class, response_body = c.response_body, duration_ms = c.duration_ms
      from closed c
     where a.delivery_id = c.id and a.lease_token = c.lease_token
  ), unleased as (
    -- Each slot found by a LATERAL lookup with LIMIT, updated by tuple id (as the trigger does).
    -- Only the holder of its delivery's row lock, this statement, changes a filled slot.
    update delivery_lease l set delivery_id = null, lease_expires_at = null
     where l.ctid = any(array(
       select k.ctid from closed c
        cross join lateral (
          select l.ctid from delivery_lease l where l.endpoint_id = c.endpoint_id and l.delivery_id = c.id limit 1
        ) k))
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
           'credentials_rejected', c.credentials_rejected, 'endpoint_at_fault', c.endpoint_at_fault)
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
      endpoint_at_fault boolean)
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
      update endpoint e set consecutive_failures = e.consecutive_failures + 1 where e.id = f.endpoint_id;
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

-- TRUNCATE of delivery empties the deferred rows too (as 0015 with the other queue tables).
create or replace function herald_truncate_queue()
returns trigger
language plpgsql
as $$
begin
  truncate delivery_due, delivery_deferred, delivery_failed;
  update delivery_lease set delivery_id = null, lease_expires_at = null where delivery_id is not null;
  return null;
end
$$;

-- Moves up to `batch` of a disabled endpoint's rows from delivery_due to delivery_deferred, held.
-- Deliveries locked by a writer are left for the next tending. Returns how many moved.
create function herald_hold_endpoint(endpoint text, batch int)
returns int
language plpgsql volatile
set enable_seqscan = off
set jit = off
as $$
declare
  moved int;
begin
  -- Still disabled, and held so until this transaction ends: an enable waits for it (and then
  -- releases what this moved), or holds the endpoint already (then nothing is held here).
  perform 1 from endpoint x where x.id = endpoint and x.disabled for share skip locked;
  if not found then
    return 0;
  end if;
  with picked as materialized (
    select q.ctid as at
      from delivery_due q
      cross join lateral (
        select 1 from delivery p where p.id = q.delivery_id limit 1 for no key update skip locked
      ) p
     where q.endpoint_id = endpoint
     limit batch
  ), gone as (
    delete from delivery_due q where q.ctid = any(array(select at from picked))
    returning q.endpoint_id, q.next_attempt_at, q.delivery_id
  )
  insert into delivery_deferred (endpoint_id, next_attempt_at, delivery_id, held)
  select g.endpoint_id, g.next_attempt_at, g.delivery_id, true from gone g;
  get diagnostics moved = row_count;
  return moved;
end
$$;

-- Releases up to `batch` of an endpoint's held rows, earliest first: those due within the horizon
-- back to delivery_due, the others to wait in delivery_deferred unheld. Returns how many were
-- released.
create function herald_release_endpoint(endpoint text, batch int)
returns int
language plpgsql volatile
set enable_seqscan = off
set jit = off
as $$
declare
  released int;
begin
  -- Still enabled, and kept so until this transaction ends (as herald_hold_endpoint, the other way).
  perform 1 from endpoint x where x.id = endpoint and not x.disabled for share skip locked;
  if not found then
    return 0;
  end if;
  with picked as materialized (
    select q.ctid as at, q.next_attempt_at <= now() + herald_defer_horizon() as coming
      from delivery_deferred q
      cross join lateral (
        select 1 from delivery p where p.id = q.delivery_id limit 1 for no key update skip locked
      ) p
     where q.endpoint_id = endpoint and q.held
     order by q.next_attempt_at
     limit batch
  ), gone as (
    delete from delivery_deferred q where q.ctid = any(array(select at from picked where coming))
    returning q.endpoint_id, q.next_attempt_at, q.delivery_id
  ), requeued as (
    insert into delivery_due (endpoint_id, next_attempt_at, delivery_id)
    select g.endpoint_id, g.next_attempt_at, g.delivery_id from gone g
  ), unheld as (
    update delivery_deferred q set held = false where q.ctid = any(array(select at from picked where not coming))
  )
  select count(*)::int into released from picked;
  return released;
end
$$;

-- Disabling an endpoint holds its due rows; enabling it releases its held ones, in the
-- transaction that changes it (which holds the endpoint's row: no claim takes its work meanwhile).
-- Up to 10,000 rows, so that neither an auto-disable inside an outcome write nor an enable through
-- the API moves a whole backlog: tending moves the rest (one endpoint's rows left in delivery_due
-- cost a claim one step; an enabled endpoint's first 10,000 deliveries keep it busy meanwhile).
create function herald_endpoint_disabled_changed()
returns trigger
language plpgsql
as $$
begin
  if new.disabled then
    perform herald_hold_endpoint(new.id, 10000);
  else
    perform herald_release_endpoint(new.id, 10000);
  end if;
  return null;
end
$$;

create trigger endpoint_disabled_changed after update of disabled on endpoint
  for each row when (old.disabled is distinct from new.disabled)
  execute function herald_endpoint_disabled_changed();

-- When an endpoint was last enabled: its backlog waited on purpose until then, and how long it
-- has waited unserved (herald doctor's deliveries_overdue, the oldest-due gauge) counts from it,
-- not from the deliveries' due times hours before.
alter table endpoint add column enabled_at timestamptz;

create function herald_endpoint_enabled_at()
returns trigger
language plpgsql
as $$
begin
  new.enabled_at := now();
  return new;
end
$$;

create trigger endpoint_enabled_at before update of disabled on endpoint
  for each row when (old.disabled and not new.disabled)
  execute function herald_endpoint_enabled_at();

-- The workers' tending, up to `batch` rows for each of its steps:
--   requeued  rows coming due within the horizon, back to delivery_due;
--   held      rows of disabled endpoints: coming due in delivery_deferred, or in delivery_due
--             (queued by a publish, or by a retry, since the endpoint was disabled);
--   released  held rows of enabled endpoints (past the 10,000 that the enable released, or a hold
--             that raced with it), when asked: this step walks every endpoint with held rows,
--             so it runs less often.
-- One tending at a time: a second one returns at once, `tended` false.
create function herald_tend_deferred(batch int, release_held boolean)
returns table (requeued int, held int, released int, tended boolean)
language plpgsql volatile
set enable_seqscan = off
set enable_hashjoin = off
set enable_mergejoin = off
set jit = off
as $$
declare
  e record;
begin
  requeued := 0;
  held := 0;
  released := 0;
  tended := pg_try_advisory_xact_lock(hashtext('herald_tend_deferred'));
  if not tended then
    return next;
    return;
  end if;

  with coming as materialized (
    select q.ctid as at, x.disabled
      from delivery_deferred q
      cross join lateral (
        select 1 from delivery p where p.id = q.delivery_id limit 1 for no key update skip locked
      ) p
      -- The endpoint as it is, kept so until this transaction ends: a disable or enable under way
      -- leaves its rows for the next tending.
      cross join lateral (
        select x.disabled from endpoint x where x.id = q.endpoint_id limit 1 for share skip locked
      ) x
     where not q.held and q.next_attempt_at <= now() + herald_defer_horizon()
     order by q.next_attempt_at
     limit batch
  ), gone as (
    delete from delivery_deferred q where q.ctid = any(array(select at from coming where not disabled))
    returning q.endpoint_id, q.next_attempt_at, q.delivery_id
  ), back as (
    insert into delivery_due (endpoint_id, next_attempt_at, delivery_id)
    select g.endpoint_id, g.next_attempt_at, g.delivery_id from gone g
    returning 1
  ), holding as (
    update delivery_deferred q set held = true where q.ctid = any(array(select at from coming where disabled))
    returning 1
  )
  select (select count(*) from back), (select count(*) from holding) into requeued, held;

  for e in
    select x.id from endpoint x
     where x.disabled and exists (select 1 from delivery_due q where q.endpoint_id = x.id)
     order by x.id
  loop
    exit when held >= batch;
    held := held + herald_hold_endpoint(e.id, batch - held);
  end loop;

  if release_held then
    for e in
      with recursive holding_endpoints(id) as (
        (select q.endpoint_id from delivery_deferred q where q.held order by q.endpoint_id limit 1)
        union all
        select (select q.endpoint_id from delivery_deferred q where q.held and q.endpoint_id > h.id
                 order by q.endpoint_id limit 1)
          from holding_endpoints h where h.id is not null
      )
      select h.id from holding_endpoints h
       where h.id is not null
         and exists (select 1 from endpoint x where x.id = h.id and not x.disabled)
    loop
      exit when released >= batch;
      released := released + herald_release_endpoint(e.id, batch - released);
    end loop;
  end if;
  return next;
end
$$;
