-- API keys join the announced tables of 0006: API processes cache the key behind each bearer
-- token (a query per request otherwise) and evict it when its row changes, so a revocation made
-- anywhere (the API, the CLI, an operator's SQL) takes effect when its commit is announced.
create trigger api_key_changed after insert or update or delete on api_key
  for each row execute function herald_announce_change('herald_api_key_changed');
create trigger api_key_truncated after truncate on api_key
  for each statement execute function herald_announce_change('herald_api_key_changed');
