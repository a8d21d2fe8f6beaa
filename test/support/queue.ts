// The queue tables (migration 0015) are a projection of the deliveries' states: one delivery_due
// or delivery_deferred row (0030) per pending delivery (at its next_attempt_at), one delivery_lease
// row per delivery in flight
// (its endpoint's slot holds it until its lease_expires_at), one delivery_failed row per failed
// delivery. This scalar subquery counts the rows on either side that the other lacks, for the
// endpoints of app $1.

export const MISQUEUED_SQL = `(
  with projected as (
    select state, endpoint_id, id, case state when 'pending' then next_attempt_at
                                              when 'sending' then lease_expires_at end as at
      from delivery where app_id = $1 and state in ('pending', 'sending', 'failed')
  ), queued as (
    select 'pending' as state, q.endpoint_id, q.delivery_id, q.next_attempt_at from delivery_queued q
     where q.endpoint_id in (select id from endpoint where app_id = $1)
    union all
    select 'sending', l.endpoint_id, l.delivery_id, l.lease_expires_at from delivery_lease l
     where l.endpoint_id in (select id from endpoint where app_id = $1) and l.delivery_id is not null
    union all
    select 'failed', f.endpoint_id, f.delivery_id, null from delivery_failed f
     where f.endpoint_id in (select id from endpoint where app_id = $1)
  )
  select count(*)::int from ((table projected except all table queued)
                             union all (table queued except all table projected)) x
)`;
