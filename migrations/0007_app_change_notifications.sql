-- Every change to an application (created, updated or deleted) is announced on the channel
-- herald_app_changed with the app's id, when its transaction commits: publishers cache the apps
-- they publish to and evict on this signal (as 0006 does for sources).
create function herald_announce_app_change() returns trigger
language plpgsql as $$
begin
  perform pg_notify('herald_app_changed', coalesce(new.id, old.id));
  return null;
end
$$;

create trigger app_changed after insert or update or delete on app
  for each row execute function herald_announce_app_change();
