-- Identifiers and keys compare byte by byte (collation "C").
--
-- Every hot path is a walk of B-tree indexes on text keys: the claim steps from endpoint id to
-- endpoint id, every outcome, attempt and foreign-key check looks up a delivery, message or
-- endpoint id, publish looks up (app_id, idempotency_key). Under the database's collation each
-- comparison of two keys went through the locale (strcoll, or ICU): about a tenth of the
-- database's time per delivery on an ICU `en-US` database, and a few per cent even on
-- `C.UTF-8`, which PostgreSQL before 17 does not recognise as bytewise. herald's ids are ASCII
-- (prefix, underscore, hex), for which byte order is the order they already had; uids, event type
-- names, idempotency keys and providers' delivery ids are only ever matched for equality, and
-- equality does not depend on the collation. Indexes on these columns are rebuilt; the tables are
-- not rewritten.

alter table app
  alter column id type text collate "C",
  alter column uid type text collate "C";

alter table event_type
  alter column name type text collate "C";

alter table endpoint
  alter column id type text collate "C",
  alter column app_id type text collate "C",
  alter column uid type text collate "C";

alter table endpoint_secret
  alter column app_id type text collate "C",
  alter column endpoint_id type text collate "C";

alter table message
  alter column id type text collate "C",
  alter column app_id type text collate "C",
  alter column idempotency_key type text collate "C";

alter table delivery
  alter column id type text collate "C",
  alter column app_id type text collate "C",
  alter column message_id type text collate "C",
  alter column endpoint_id type text collate "C";

alter table attempt
  alter column id type text collate "C",
  alter column app_id type text collate "C",
  alter column delivery_id type text collate "C",
  alter column message_id type text collate "C",
  alter column endpoint_id type text collate "C";

alter table api_key
  alter column id type text collate "C";

alter table audit_entry
  alter column app_id type text collate "C",
  alter column target_id type text collate "C";

alter table source
  alter column id type text collate "C",
  alter column uid type text collate "C",
  alter column app_id type text collate "C";

alter table source_secret
  alter column source_id type text collate "C";

alter table intake
  alter column id type text collate "C",
  alter column source_id type text collate "C",
  alter column app_id type text collate "C",
  alter column delivery_id type text collate "C",
  alter column message_id type text collate "C";

alter table intake_observation
  alter column intake_id type text collate "C",
  alter column app_id type text collate "C";
