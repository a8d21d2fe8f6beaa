-- No JIT compilation for the functions on the hot paths, whatever their plans' estimates.
--
-- PostgreSQL compiles a plan whose estimated cost passes jit_above_cost (100,000 by default) at
-- every execution: a cached generic plan is compiled again each time. These functions run small
-- batches of lookups by key, and their estimates can still pass it: a lookup of the attempts by
-- delivery estimated at 771 rows made lease recovery's plan cost that much, and its compilation
-- took ~100 ms of a pass that otherwise takes 10-20 (0016). The functions that pin their plans
-- with `enable_* = off` are at more risk still: a plan left no way but a disabled node is costed
-- past 10^10. JIT pays for long analytic queries, never for these.
alter function herald_claim(int, interval, text, uuid) set jit = off;
alter function herald_record_outcomes(jsonb, int) set jit = off;
alter function herald_publish_messages(jsonb, boolean) set jit = off;
alter function herald_record_receipts(jsonb, int) set jit = off;
alter function herald_release_claim(uuid) set jit = off;
alter function herald_follow_deliveries() set jit = off;
