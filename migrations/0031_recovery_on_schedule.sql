-- A recovered lease's delivery waits its turn on the retry schedule, like any attempt whose outcome
-- is unknown.
--
-- Until now lease recovery made the delivery due at once: a worker that died mid-request left its
-- endpoint a retry right after the lease ran out, however many attempts it had already had, and a
-- message that kills the worker sending it (a payload the process cannot hold) came round again at
-- every recovery, a crash loop until the cycle's budget was spent. An attempt that timed out —
-- the same unknown outcome, seen by a live worker — waits the schedule's step; now so does this one,
-- with the same jitter. No Retry-After applies: nobody answered.
--
-- The schedule and jitter come from the worker's configuration (HERALD_RETRY_SCHEDULE), as the
-- cycle's budget did: a budget of n steps allows n + 1 attempts. Workers from before this
-- migration call the two-argument version of 0016, which stays, unchanged, until none is left.

create function herald_recover_expired_leases(schedule double precision[], jitter double precision, batch int)
returns table (delivery_id text, endpoint_id text, lease_token uuid)
language sql volatile
-- As in 0016: the lookups' estimates must not cost a plan past jit_above_cost.
set jit = off
as $$
  with expired as (
    select d.id, d.lease_token
      from delivery_lease l
      cross join lateral (
        select d.id, d.lease_token from delivery d
         where d.id = l.delivery_id and d.state = 'sending' and d.lease_expires_at < now()
         limit 1
         for update of d skip locked
      ) d
     where l.lease_expires_at < now()
     order by l.lease_expires_at
     limit batch
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
