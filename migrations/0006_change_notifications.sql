-- Every change to an application or a source (created, updated — a source's secrets rotated
-- included — or deleted) is announced when its transaction commits, with the row's id, on the
-- channel named by the trigger: herald_app_changed, herald_source_changed. API processes cache
-- the apps they publish to and the sources they receive on, and evict on this signal. A trigger,
-- so that every writer (the API, the CLI, an operator's SQL) announces its changes.
create function herald_announce_change() returns trigger
language plpgsql as $$
begin
  perform pg_notify(tg_argv[0], coalesce(new.id, old.id));
  return null;
end
$$;

create trigger app_changed after insert or update or delete on app
  for each row execute function herald_announce_change('herald_app_changed');

create trigger source_changed after insert or update or delete on source
  for each row execute function herald_announce_change('herald_source_changed');
