-- A resend of a delivery whose attempt is in flight is queued behind that attempt, as Svix's
-- resend always is: the attempt ends (its outcome recorded as it comes: success, failure or
-- unknown), and the delivery starts a new cycle at once, as a resend of a finished delivery does.
--
-- Until now such a resend was refused (409 attempt_in_flight, with a Retry-After for when to ask
-- again): one request in flight per endpoint and one delivery per message × endpoint leave no
-- room for a second request now, and the SDKs that call resend do not expect a 409.
--
-- The request is a mark on the delivery (resend_requested_at). Whatever ends the attempt — the
-- outcome write, lease recovery, a give-back of a lease never sent — leaves `sending`; a trigger
-- turns that update into the new cycle's start, so that no writer needs to know of it. The
-- outcome write and the claim keep the queue tables from what their updates return, and the other
-- writers' statement trigger from their transition tables: both see the row as this trigger left it.
-- The mark is not indexed: the updates of a delivery stay HOT.

alter table delivery add column resend_requested_at timestamptz;

create function herald_resend_after_attempt()
returns trigger
language plpgsql
as $$
begin
  -- As a resend of a finished delivery (deliveries.ts, RESTART): a new cycle with a fresh budget,
  -- due now, its next attempt marked manual.
  new.cycle := old.cycle + 1;
  new.attempts_in_cycle := 0;
  new.state := 'pending';
  new.next_attempt_at := now();
  new.trigger := 'manual';
  new.resend_requested_at := null;
  return new;
end
$$;

create trigger delivery_resend_after_attempt before update on delivery
  for each row when (old.state = 'sending' and new.state <> 'sending' and old.resend_requested_at is not null)
  execute function herald_resend_after_attempt();
