-- A message is found by its event id through an index. Every request about one message (get it,
-- its attempts, its destinations, a content delete) names it by its id or by the eventId its
-- publisher gave it, as Svix allows, and the lookup tested both in one condition: PostgreSQL read
-- the whole message table for it (164 ms at 1,000,000 messages, per request). The lookup now tries
-- the id first (the primary key), then the event id through this index, which holds only the
-- messages that have one.
--
-- Built in the migration's transaction: publishes wait for it, readers do not (~0.2 s per million
-- messages here).
create index message_event_id_idx on message (app_id, event_id) where event_id is not null;
