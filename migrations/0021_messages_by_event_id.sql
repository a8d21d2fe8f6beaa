-- An event id compares bytewise, as every identifier an index covers (0008): equality is the same
-- under either collation, and the index 0022 builds on it needs no locale. The column keeps its
-- bytes (no rewrite), but the change locks the message table until its commit: it commits alone,
-- at once, and does not hold that lock while the index is built.
alter table message alter column event_id type text collate "C";
