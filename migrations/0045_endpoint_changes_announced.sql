-- A change to where and how an endpoint's requests go is announced to the workers. A worker holds
-- the deliveries it claimed until each has a place at its origin (8 connections per origin, for
-- up to most of a lease), each with the URL, headers and secret version its claim read: without
-- this, a request could leave seconds after the API had answered a delete, a disable, a new URL
-- or a rotation that revoked the old secret at once — to the old URL, signed by the revoked
-- secret. Each worker listens on `herald_endpoint_changed` (the endpoint's id) and gives back,
-- unsent, whatever it claimed of that endpoint before it heard of the change: claimed again, it
-- goes out as the endpoint is now, or not at all.
--
-- The outcome writes update endpoints too (their failure counts, an auto-disable): the trigger
-- fires only for the columns a request is made from, and only when one of them changed.

create or replace function herald_endpoint_changed() returns trigger
language plpgsql as $$
begin
  perform pg_notify('herald_endpoint_changed', old.id);
  return null;
end $$;

create trigger endpoint_request_changed
  after update of url, headers, disabled, secret_version on endpoint
  for each row
  when (old.url is distinct from new.url or old.headers is distinct from new.headers
        or old.disabled is distinct from new.disabled or old.secret_version is distinct from new.secret_version)
  execute function herald_endpoint_changed();

-- Deleted on its own, or with its application (a cascade fires row triggers too).
create trigger endpoint_deleted_announced
  after delete on endpoint
  for each row
  execute function herald_endpoint_changed();
