-- The failed deliveries parked with unknown attempts, indexed apart: the gauges that count them
-- (herald_unknown_outcomes_parked, herald_unknown_outcomes_oldest_seconds) and `herald doctor`
-- read those few, where every scrape read every failed delivery ever recorded — a table that only
-- history retention, which is opt-in, ever shrinks. Built in the migration's transaction, as 0020.
create index delivery_failed_unknown_idx on delivery_failed (delivery_id) include (unknown_attempts)
  where unknown_attempts > 0;
