-- Each failed delivery counts its attempts with an unknown outcome, so that what reads them (the
-- metrics gauge herald_unknown_outcomes_parked, `herald doctor`) reads the failed deliveries, not
-- the attempt history. Both joined every failed delivery to its attempts: PostgreSQL read the
-- whole attempt table to find the unknown ones (~95 ms at 830,000 attempts, at every scrape of
-- every herald process), or looked up every attempt of every failed delivery — either way a cost
-- that grows with the history, which is kept for months.
--
-- A delivery's attempts are all finished when it is parked as failed, and none changes while it
-- stays there (a resend takes it out first), so the count is taken once, from the attempts it has
-- as it enters. A trigger takes it, whoever parks the delivery: the outcome write, or the
-- statement-level trigger that follows every other writer (lease recovery, an operator's SQL).
-- It runs after the statement, as the attempt that ended the delivery is finished by the same
-- statement (a sibling in the outcome write's WITH, which a BEFORE trigger would not yet see). It
-- fires for each parked delivery only: the outcome write's empty inserts cost it nothing.
--
-- The deliveries already parked are counted first, without locking anyone out (a join with the
-- attempt history, the slow part). Adding the column then locks the table until this migration
-- commits — every outcome write, recovery and scrape waits — so under the lock only what changed
-- meanwhile is counted again: a delivery parked since, which this migration has not seen (a
-- delivery parked again is a new row version, with a new xmin).
create temporary table parked_before on commit drop as
  select f.delivery_id, f.xmin::text as parked_by, count(a.delivery_id)::int as unknown_attempts
    from delivery_failed f
    left join attempt a on a.delivery_id = f.delivery_id and a.outcome = 'unknown'
   group by f.delivery_id, f.xmin::text;

alter table delivery_failed add column unknown_attempts int not null default 0;

update delivery_failed f
   set unknown_attempts = c.unknown_attempts
  from (select f.delivery_id,
               coalesce(p.unknown_attempts,
                        (select count(*)::int from attempt a
                          where a.delivery_id = f.delivery_id and a.outcome = 'unknown')) as unknown_attempts
          from delivery_failed f
          left join parked_before p on p.delivery_id = f.delivery_id and p.parked_by = f.xmin::text) c
 where f.delivery_id = c.delivery_id and c.unknown_attempts > 0;

-- Statistics on the new column now: without them the planner assumes a third of the failed
-- deliveries have unknown attempts, and `herald doctor`'s estimate passes jit_above_cost (118 ms
-- of compilation for ~20 ms of work, at 100,000 failed deliveries).
analyze delivery_failed;

-- The attempts found by their delivery's index, whatever the size of the table when the plan was
-- cached (a plan made on a small table would read a grown one whole).
create function herald_count_unknown_attempts()
returns trigger
language plpgsql
set enable_seqscan = off
set jit = off
as $$
declare
  unknown_count int;
begin
  select count(*) into unknown_count from attempt a where a.delivery_id = new.delivery_id and a.outcome = 'unknown';
  if unknown_count > 0 then
    update delivery_failed f set unknown_attempts = unknown_count
     where f.endpoint_id = new.endpoint_id and f.delivery_id = new.delivery_id;
  end if;
  return null;
end
$$;

create trigger delivery_failed_counts_unknown after insert on delivery_failed
  for each row execute function herald_count_unknown_attempts();
