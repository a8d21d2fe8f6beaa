-- An intake record whose message history retention deleted says so. The foreign key sets its
-- message_id to null then, which looked like a claim that never produced its message: the
-- doctor's `intake_without_message` reported every pruned inbound event, and advised asking the
-- provider to deliver it again — a duplicate of an event delivered long ago.
alter table intake add column message_pruned_at timestamptz;
