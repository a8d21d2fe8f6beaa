-- Tending clears the marks of rests that ended over a minute ago as its last statement, not before
-- its walk over held rows: the slots it locks to clear them are of endpoints delivering again, and
-- an outcome write or a claim of one waited for the rest of the tending (up to the walk over 5,000
-- endpoints' held rows, ~25 ms, every 30 s). Otherwise as in 0033.

create or replace function herald_tend_deferred(batch int, release_held boolean)
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
    select q.ctid as at, x.closed
      from delivery_deferred q
      cross join lateral (
        select 1 from delivery p where p.id = q.delivery_id limit 1 for no key update skip locked
      ) p
      -- The endpoint as it is, kept so until this transaction ends: a disable, enable or lift under
      -- way leaves its rows for the next tending.
      cross join lateral (
        select x.disabled or herald_endpoint_resting(x.id) as closed
          from endpoint x where x.id = q.endpoint_id limit 1 for share skip locked
      ) x
     where not q.held and q.next_attempt_at <= now() + herald_defer_horizon()
     order by q.next_attempt_at
     limit batch
  ), gone as (
    delete from delivery_deferred q where q.ctid = any(array(select at from coming where not closed))
    returning q.endpoint_id, q.next_attempt_at, q.delivery_id
  ), back as (
    insert into delivery_due (endpoint_id, next_attempt_at, delivery_id)
    select g.endpoint_id, g.next_attempt_at, g.delivery_id from gone g
    returning 1
  ), holding as (
    update delivery_deferred q set held = true where q.ctid = any(array(select at from coming where closed))
    returning 1
  )
  select (select count(*) from back), (select count(*) from holding) into requeued, held;

  -- A resting endpoint with more than 1,000 due rows stays in the walk for this rest: its mark goes,
  -- so that tending does not count its rows again at every pass (~90 µs each). Its rows that were
  -- held before, the walk over held rows releases as the rest ends.
  update delivery_lease s set rests_until = null
   where s.ctid = any(array(
     select l.ctid from delivery_lease l
      where l.rests_until > now() + herald_defer_horizon()
        and exists (select 1 from delivery_due q where q.endpoint_id = l.endpoint_id offset 1000)
        for update skip locked));

  for e in
    select x.id from endpoint x
     where x.disabled and exists (select 1 from delivery_due q where q.endpoint_id = x.id)
    union
    -- Resting beyond the horizon, with a backlog small enough to be worth moving (at the head).
    select s.endpoint_id from delivery_lease s
     where s.rests_until > now() + herald_defer_horizon() and s.next_start_at > now() + herald_defer_horizon()
       and exists (select 1 from delivery_due q where q.endpoint_id = s.endpoint_id)
       and not exists (select 1 from delivery_due q where q.endpoint_id = s.endpoint_id offset 1000)
    order by 1
  loop
    exit when held >= batch;
    held := held + herald_hold_endpoint(e.id, batch - held);
  end loop;

  -- Rests ending within the horizon, or lifted: their endpoints' rows come back before the slot
  -- opens. A mark a minute past is cleared; the walk over held rows below releases what one left.
  for e in
    select s.endpoint_id as id from delivery_lease s
     where s.rests_until > now() - interval '1 minute' and s.rests_until <= now() + herald_defer_horizon()
       and exists (select 1 from delivery_deferred q where q.endpoint_id = s.endpoint_id and q.held)
     order by s.endpoint_id
  loop
    exit when released >= batch;
    released := released + herald_release_endpoint(e.id, batch - released);
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
         and not herald_endpoint_resting(h.id)
    loop
      exit when released >= batch;
      released := released + herald_release_endpoint(e.id, batch - released);
    end loop;
  end if;
  -- Last, so that the slots it locks are held only to the commit that follows: those endpoints'
  -- rests ended a minute ago, so they are delivering again, and an outcome write or a claim of one
  -- waits for its slot. Never waiting for a slot: an outcome write holds its slot, then waits for
  -- the endpoint that the first step holds shared.
  update delivery_lease s set rests_until = null
   where s.ctid = any(array(
     select l.ctid from delivery_lease l where l.rests_until < now() - interval '1 minute' for update skip locked));
  return next;
end
$$;
