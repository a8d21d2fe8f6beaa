-- An operator's acknowledgement of an unknown outcome (`herald reconcile --message … --acknowledge`)
-- is kept on the attempt itself: the attempt stays `unknown` — that is what herald knows of it —
-- and `acknowledged_at` says someone looked into it and left it. A delivery parked again later
-- (restarted, then failed anew) counts only the unknown attempts nobody has acknowledged, so an
-- acknowledgement is not undone by the next parking. Nullable, no default: adding it rewrites
-- nothing.
alter table attempt add column acknowledged_at timestamptz;

-- As in 0019, counting the unacknowledged ones only.
create or replace function herald_count_unknown_attempts()
returns trigger
language plpgsql
set enable_seqscan = off
set jit = off
as $$
declare
  unknown_count int;
begin
  select count(*) into unknown_count from attempt a
   where a.delivery_id = new.delivery_id and a.outcome = 'unknown' and a.acknowledged_at is null;
  if unknown_count > 0 then
    update delivery_failed f set unknown_attempts = unknown_count
     where f.endpoint_id = new.endpoint_id and f.delivery_id = new.delivery_id;
  end if;
  return null;
end
$$;
