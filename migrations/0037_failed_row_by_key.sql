-- Two rows a write could leave behind for good, now removed:
--
-- - The trigger that follows the rarer writers locks a delivery's failed row before it deletes it
--   (by the tuple id it then reads, in a snapshot taken after the wait), as 0036 found for the lease
--   slots. An acknowledgment of its
--   unknown attempts (`herald reconcile --acknowledge`) rewrites that row; a resend, recovery or
--   replay that read it before the acknowledgment committed deleted nothing,
--   and the next parking of the delivery then failed on the row left behind — with it, every
--   outcome of that write's batch, and lease recovery, which would park it again at every pass.
--   (The acknowledgment now also locks the message's deliveries first, as those writers do.)
--
-- - Lease recovery empties an expired slot whose delivery no longer exists (history retention
--   removed the finished delivery that a write before 0036 left in it): before, its walk joined
--   the slot to its delivery and passed over one it could not find, and the endpoint was never
--   claimed again. Otherwise as in 0036.

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
    -- The failed rows' current versions, locked first: an acknowledgment may have rewritten one
    -- after this statement's snapshot was taken, and the delete below, by the tuple id it reads in
    -- a snapshot of its own taken after this wait, then finds the version that is there.
    perform 1 from old_rows o
      cross join lateral (
        select 1 from delivery_failed f where f.endpoint_id = o.endpoint_id and f.delivery_id = o.id limit 1
           for update of f
      ) k
     where o.state = 'failed';
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
      -- By key, not by tuple id: see the header.
      update delivery_lease l set delivery_id = null, lease_expires_at = null
        from old_rows o
       where o.state = 'sending' and l.endpoint_id = o.endpoint_id and l.delivery_id = o.id
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

create or replace function herald_recover_expired_leases(schedule double precision[], jitter double precision, batch int)
returns table (delivery_id text, endpoint_id text, lease_token uuid)
language sql volatile
-- As in 0016: the lookups' estimates must not cost a plan past jit_above_cost.
set jit = off
as $$
  with ran_out as (
    select l.endpoint_id, l.delivery_id as slot_delivery, d.id, d.lease_token,
           d.state = 'sending' as expired, d.id is null or d.state <> 'sending' as left_filled
      from delivery_lease l
      left join lateral (
        -- A live lease (whatever the slot says) is neither, and is not locked.
        select d.id, d.lease_token, d.state from delivery d
         where d.id = l.delivery_id and (d.state <> 'sending' or d.lease_expires_at < now())
         limit 1
         for update of d skip locked
      ) d on true
     where l.lease_expires_at < now()
       -- Found and locked, or gone: a slot whose finished delivery history retention removed. (A
       -- scalar lookup, by key: NOT EXISTS here is planned as a hashed read of every delivery.)
       and (d.id is not null or (select true from delivery x where x.id = l.delivery_id limit 1) is null)
     order by l.lease_expires_at
     limit batch
  ), expired as (
    select r.id, r.lease_token from ran_out r where r.expired
  ), emptied as (
    -- Its delivery locked and finished, or gone: no lease of it is live, and no writer will empty
    -- the slot.
    update delivery_lease l set delivery_id = null, lease_expires_at = null
      from ran_out r
     where r.left_filled and l.endpoint_id = r.endpoint_id and l.delivery_id = r.slot_delivery
  ), released as (
    update delivery d
       set state = case when d.attempts_in_cycle > cardinality(schedule) or not e.idempotent then 'failed'
                        else 'pending' end,
           -- The step after attempt n is schedule[n] (arrays count from 1 here).
           next_attempt_at = case when d.attempts_in_cycle > cardinality(schedule) or not e.idempotent then null
                                  else now() + make_interval(
                                    secs => coalesce(schedule[d.attempts_in_cycle], 0) * (1 + jitter * (2 * random() - 1)))
                             end,
           lease_token = null, lease_expires_at = null, trigger = 'scheduled', updated_at = now()
      from expired, endpoint e
     where d.id = expired.id and e.id = d.endpoint_id
    returning d.id, d.endpoint_id, expired.lease_token
  ), marked as (
    update attempt a
       set outcome = 'unknown', finished_at = now(), response_class = 'lease_expired'
     where a.ctid = any(array(
       select k.ctid from released r
        cross join lateral (
          select a.ctid from attempt a
           where a.delivery_id = r.id and a.lease_token = r.lease_token and a.outcome is null
           limit 1
        ) k))
    returning a.id
  )
  select released.id, released.endpoint_id, released.lease_token from released
$$;
