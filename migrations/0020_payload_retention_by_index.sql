-- Payload retention finds the payloads past their period through an index. Every worker runs it
-- once a minute, and without an index it read the whole message table to find the few that had
-- expired: ~100 ms and 420 MB of buffers at 1,000,000 messages (a parallel sequential scan), and
-- the history grows by every message ever published for as long as it is kept. The index holds
-- only the messages that still have a payload (retention nulls it), so its size follows the
-- retention period, not the history: 0.07 ms for the same run. A publish writes one more index
-- entry (a single-message publish ~260 -> ~265 µs of PostgreSQL, serial).
--
-- Built in the migration's transaction: publishes wait for it (~0.3 s per million messages here).
create index message_payload_expiry_idx on message (payload_expires_at) where payload is not null;
