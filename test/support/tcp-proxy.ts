// A TCP proxy on 127.0.0.1 in front of another server (PostgreSQL, in the outage tests), to make a
// database blip on demand: `cutAll()` destroys every live connection (as a crashed server or a
// broken network would), `pause()` refuses new ones until `resume()`. It counts what it saw, so a
// test can wait for "the client tried to reconnect" as a condition instead of sleeping.

import net from 'node:net';

export interface TcpProxy {
  readonly host: string;
  readonly port: number;
  /** Connections the proxy has accepted from clients, refused ones included. */
  readonly connectionAttempts: number;
  /** Connections refused while paused. */
  readonly refused: number;
  /** Client connections currently relayed. */
  readonly live: number;
  readonly paused: boolean;
  /** `url` with its host and port replaced by the proxy's. */
  urlFor(url: string): string;
  /** Destroys every relayed connection, both sides, at once. */
  cutAll(): void;
  /** From now on, new connections are reset as soon as they arrive. */
  pause(): void;
  resume(): void;
  close(): Promise<void>;
}

export async function startTcpProxy(target: { host: string; port: number }): Promise<TcpProxy> {
  const pairs = new Set<{ client: net.Socket; upstream: net.Socket }>();
  let paused = false;
  let connectionAttempts = 0;
  let refused = 0;

  const server = net.createServer((client) => {
    connectionAttempts++;
    client.on('error', () => {});
    if (paused) {
      refused++;
      // A reset, like a server that is down or a network that drops the connection.
      client.resetAndDestroy();
      return;
    }
    const upstream = net.connect(target.port, target.host);
    upstream.on('error', () => {});
    const pair = { client, upstream };
    pairs.add(pair);
    const drop = () => {
      pairs.delete(pair);
      client.destroy();
      upstream.destroy();
    };
    client.on('close', drop);
    upstream.on('close', drop);
    client.pipe(upstream);
    upstream.pipe(client);
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, '127.0.0.1', resolve);
  });
  const { port } = server.address() as net.AddressInfo;

  return {
    host: '127.0.0.1',
    port,
    get connectionAttempts() {
      return connectionAttempts;
    },
    get refused() {
      return refused;
    },
    get live() {
      return pairs.size;
    },
    get paused() {
      return paused;
    },
    urlFor(url) {
      const parsed = new URL(url);
      parsed.hostname = '127.0.0.1';
      parsed.port = String(port);
      return parsed.toString();
    },
    cutAll() {
      for (const { client, upstream } of [...pairs]) {
        client.resetAndDestroy();
        upstream.destroy();
      }
      pairs.clear();
    },
    pause() {
      paused = true;
    },
    resume() {
      paused = false;
    },
    async close() {
      paused = true;
      for (const { client, upstream } of [...pairs]) {
        client.destroy();
        upstream.destroy();
      }
      pairs.clear();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
