-- Every change to an application or a source (created, updated or deleted, or the table
-- truncated) is announced when its transaction commits, on the channel named by the trigger —
-- herald_app_changed, herald_source_changed — with the row's id ('' for a truncation: everything
-- changed). API processes cache the apps they publish to and the sources they receive on, and
-- evict on this signal. Triggers, so that every writer (the API, the CLI, an operator's SQL)
-- announces its changes.
create function herald_announce_change() returns trigger
language plpgsql as $$
begin
  if tg_level = 'STATEMENT' then
    perform pg_notify(tg_argv[0], '');
  else
    perform pg_notify(tg_argv[0], coalesce(new.id, old.id));
  end if;
  return null;
end
$$;

create trigger app_changed after insert or update or delete on app
  for each row execute function herald_announce_change('herald_app_changed');
create trigger app_truncated after truncate on app
  for each statement execute function herald_announce_change('herald_app_changed');

create trigger source_changed after insert or update or delete on source
  for each row execute function herald_announce_change('herald_source_changed');
create trigger source_truncated after truncate on source
  for each statement execute function herald_announce_change('herald_source_changed');

-- A source's secrets are part of the source: any change to them bumps its updated_at, which
-- announces the change and makes the verifiers built from the old secrets out of date.
create function herald_touch_source() returns trigger
language plpgsql as $$
begin
  update source set updated_at = now() where id = coalesce(new.source_id, old.source_id);
  return null;
end
$$;

create trigger source_secret_changed after insert or update or delete on source_secret
  for each row execute function herald_touch_source();
