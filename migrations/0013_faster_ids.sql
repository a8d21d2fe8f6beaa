-- Identifiers drawn without an md5.
--
-- herald_id made the random half of every id (16 hex digits) as the md5 of random() and the
-- clock, both turned into text first: ~2 µs per id, and a publish makes three (message, delivery,
-- audit entry), a receipt five, a claim one per delivery. Two draws of random() as 32-bit hex do
-- the same in ~0.5 µs. The form is unchanged — prefix, 12 hex digits of milliseconds since the
-- epoch (ids stay time-ordered), 16 random hex digits — and so is what the random half is for:
-- spreading ids that share a millisecond, not secrecy (ids are shown to API callers; keys,
-- secrets and lease tokens come from a cryptographic source). Serial loop, publishes in batches
-- of 16, databases with and without this interleaved: PostgreSQL CPU per publish 72.6 → 69.6 µs.

create or replace function herald_id(prefix text) returns text
language sql volatile as $$
  select prefix || '_' || lpad(to_hex((extract(epoch from clock_timestamp()) * 1000)::bigint), 12, '0')
         || lpad(to_hex(floor(random() * 4294967296)::bigint), 8, '0')
         || lpad(to_hex(floor(random() * 4294967296)::bigint), 8, '0')
$$;
