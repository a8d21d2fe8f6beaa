// LISTEN for a pg pool: one dedicated connection carries every channel a process listens on (the
// workers' wake-up, an API's app and source changes), and reconnects by itself. Notifications
// sent while it was away are gone: when it is back, every handler hears an empty payload once, so
// that a waiter can catch up and a cache can start afresh.

import pg from 'pg';
import { endConnection } from './pg-goodbye.ts';

type Handler = (payload: string) => void;

export interface PgListenerOptions {
  clientConfig: pg.ClientConfig;
  /** Called when the connection is lost and when it is back. */
  onState?: (state: 'lost' | 'restored', error?: Error) => void;
  retryMaxMs: number;
}

export interface PgListener {
  /** Resolves once `channel` is listened on (rejects when the first connection fails). */
  listen(channel: string, onNotify: Handler): Promise<() => Promise<void>>;
  close(): Promise<void>;
}

export function createPgListener(options: PgListenerOptions): PgListener {
  const handlers = new Map<string, Set<Handler>>();
  let client: pg.Client | null = null;
  let connecting: Promise<pg.Client> | null = null;
  let reconnecting = false;
  let closed = false;
  // One statement at a time on a connection: pg queues one sent while another runs, but deprecates
  // it (pg 9 refuses it), and a process starts and stops its caches' and workers' channels together.
  const lastStatement = new WeakMap<pg.Client, Promise<unknown>>();
  function inTurn(on: pg.Client, sql: string): Promise<unknown> {
    const statement = (lastStatement.get(on) ?? Promise.resolve()).then(() => on.query(sql));
    lastStatement.set(
      on,
      statement.catch(() => {}),
    );
    return statement;
  }

  async function connect(): Promise<pg.Client> {
    const next = new pg.Client(options.clientConfig);
    next.on('notification', (n) => {
      for (const handler of handlers.get(n.channel) ?? []) handler(n.payload ?? '');
    });
    next.on('error', (error) => lost(next, error));
    next.on('end', () => lost(next));
    try {
      await next.connect();
      for (const channel of handlers.keys()) await inTurn(next, `listen ${pg.escapeIdentifier(channel)}`);
    } catch (error) {
      // Not this listener's connection yet: nothing else would end it, and each retry opens one.
      void endConnection(next);
      throw error;
    }
    return next;
  }

  function lost(which: pg.Client, error?: Error): void {
    if (closed || client !== which) return;
    client = null;
    options.onState?.('lost', error);
    void endConnection(which);
    reconnecting = true;
    let retryMs = 100;
    const attempt = () => {
      if (closed) return;
      connect().then(
        (next) => {
          reconnecting = false;
          if (closed) return void endConnection(next);
          client = next;
          options.onState?.('restored');
          for (const set of handlers.values()) for (const handler of set) handler('');
        },
        () => {
          retryMs = Math.min(retryMs * 2, options.retryMaxMs);
          setTimeout(attempt, retryMs).unref();
        },
      );
    };
    setTimeout(attempt, retryMs).unref();
  }

  async function stop(channel: string, handler: Handler): Promise<void> {
    const set = handlers.get(channel);
    if (!set?.delete(handler) || set.size > 0) return;
    handlers.delete(channel);
    if (handlers.size === 0) {
      const last = client;
      client = null;
      if (last) await endConnection(last);
    } else {
      // Not awaited: the channel's notifications already reach no handler, and a connection gone
      // silent would hold the caller (a cache closing) for the whole query deadline.
      if (client) inTurn(client, `unlisten ${pg.escapeIdentifier(channel)}`).catch(() => {});
    }
  }

  return {
    async listen(channel, onNotify) {
      if (closed) throw new Error('the listener is closed');
      const set = handlers.get(channel) ?? new Set<Handler>();
      handlers.set(channel, set);
      set.add(onNotify);
      try {
        if (!client && !reconnecting) {
          // The first connection (or the first after every channel was let go).
          connecting ??= connect().finally(() => {
            connecting = null;
          });
          // Every listen waiting on this connect gets the same connection; a reconnect cannot run
          // meanwhile (it starts only from a live connection that is lost).
          const next = await connecting;
          if (closed) {
            await endConnection(next);
            throw new Error('the listener is closed');
          }
          client = next;
        }
        // LISTEN twice is harmless; while reconnecting, the new connection listens on every channel.
        if (client) await inTurn(client, `listen ${pg.escapeIdentifier(channel)}`);
      } catch (error) {
        await stop(channel, onNotify);
        throw error;
      }
      return () => stop(channel, onNotify);
    },
    async close() {
      closed = true;
      handlers.clear();
      const last = client;
      client = null;
      if (last) await endConnection(last);
    },
  };
}
