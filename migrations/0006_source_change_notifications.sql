-- Every change to a source (created, updated — its secrets rotated included — or deleted) is
-- announced on the channel herald_source_changed with the source's id, when its transaction
-- commits. API processes cache the sources they receive on and evict on this signal: a trigger,
-- so that every writer (the API, the CLI, an operator's SQL) announces its changes.
create function herald_announce_source_change() returns trigger
language plpgsql as $$
begin
  perform pg_notify('herald_source_changed', coalesce(new.id, old.id));
  return null;
end
$$;

create trigger source_changed after insert or update or delete on source
  for each row execute function herald_announce_source_change();
