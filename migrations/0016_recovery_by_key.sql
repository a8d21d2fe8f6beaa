-- Lease recovery walks the slots and looks each expired lease's delivery, and its attempt, up by
-- key, whatever the statistics say.
--
-- 0015's recovery joined the slots to the deliveries and left the join to the planner, which plans
-- it afresh at every pass. With statistics that autovacuum took while the slots held leases that
-- have expired since, it expects every slot to match: it hashed the slots and probed them with
-- every delivery ever made, or, told that a sending delivery is rare, drove a nested loop from a
-- scan of the deliveries. Either way it read the whole history: 85 ms a pass with 1,000 endpoints
-- and 100,000 deliveries, every 5 s in every worker, and growing with the history. Expecting many
-- expired leases, it also read the attempt history whole to mark them.
--
-- Each expired slot now finds its delivery by a LATERAL lookup with LIMIT, and each released lease
-- its attempt through the delivery's index the same way: a pass took 9 ms instead of 91 on those
-- tables, 2 of them reading the slots. The delivery's row lock is taken in its lookup, for every
-- expired slot before the batch is cut: expired leases are few (a worker died), and a lock beyond
-- the batch is held only until this statement commits. Disabling sequential scans instead would
-- be no cure: the slots are read whole by design (one row per endpoint), and a plan left no way
-- but a disabled scan is costed past jit_above_cost, and compiled at every call.

create or replace function herald_recover_expired_leases(max_attempts int, batch int)
returns table (delivery_id text, endpoint_id text, lease_token uuid)
language sql volatile
-- Its lookups cost little, but their estimates can add up past jit_above_cost (a lookup of the
-- attempts by delivery was estimated at 771 rows), and compiling the plan took ~100 ms of a pass
-- that otherwise takes 10-20.
set jit = off
as $$
  with expired as (
    select d.id, d.lease_token
      from delivery_lease l
      -- One primary-key lookup per expired slot: a LATERAL subquery with LIMIT, which the planner
      -- never turns into a join that could read the deliveries whole.
      cross join lateral (
        select d.id, d.lease_token from delivery d
         -- The expiry is tested on the delivery too: the lock re-reads the delivery, never the
         -- slot, and a lease that ended and was taken again since this statement's snapshot is live.
         where d.id = l.delivery_id and d.state = 'sending' and d.lease_expires_at < now()
         limit 1
         for update of d skip locked
      ) d
     where l.lease_expires_at < now()
     order by l.lease_expires_at
     limit batch
  ), released as (
    update delivery d
       set state = case when d.attempts_in_cycle >= max_attempts or not e.idempotent then 'failed'
                        else 'pending' end,
           next_attempt_at = case when d.attempts_in_cycle >= max_attempts or not e.idempotent then null
                                  else now() end,
           lease_token = null, lease_expires_at = null, trigger = 'scheduled', updated_at = now()
      from expired, endpoint e
     where d.id = expired.id and e.id = d.endpoint_id
    returning d.id, d.endpoint_id, expired.lease_token
  ), marked as (
    -- Each attempt found through its delivery (a LATERAL lookup with LIMIT), updated by tuple id.
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
  -- `marked` runs although nothing reads it: data-modifying CTEs always execute.
  select released.id, released.endpoint_id, released.lease_token from released
$$;
