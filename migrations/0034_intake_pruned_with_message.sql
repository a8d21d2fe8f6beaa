-- History retention deletes a finished message's inbound claims with it, and their observations.
--
-- Since 0026 a claim outlived its pruned message, marked message_pruned_at, so that a redelivery
-- of its delivery id would still be known as a duplicate however late it came. But every receipt
-- leaves a claim or an observation (~300 bytes with their indexes), and with history retention on
-- they were the one part of the history that grew without bound. Now an operator who keeps N days
-- of history keeps N days of delivery ids (at least a day), as a message's idempotency key is
-- forgotten with its message: a redelivery later than that is a new event. Providers redeliver
-- within minutes to hours of a lost acknowledgement (Stripe and Svix retry for up to three days, and
-- only what was not acknowledged).
--
-- The claims marked since 0026 go now: their messages are gone.
delete from intake where message_pruned_at is not null;
alter table intake drop column message_pruned_at;
