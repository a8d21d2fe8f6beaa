// A TCP proxy on 127.0.0.1 in front of another server (PostgreSQL, in the outage tests), to make a
// database blip on demand: `cutAll()` destroys every live connection (as a crashed server or a
// broken network would), `pause()` refuses new ones until `resume()`, and `loseAnswer()` lets a
// statement complete on the server and loses its answer on the way back. It counts what it saw,
// so a test can wait for "the client tried to reconnect" as a condition instead of sleeping.

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
  /**
   * Arms a one-shot loss: the next result whose columns `matches` accepts is dropped, with
   * everything after it on its connection, up to the server's ReadyForQuery — by then an
   * autocommit statement has committed — and that connection is cut. Resolves once it happened.
   */
  loseAnswer(matches: (columns: string[]) => boolean): Promise<void>;
  /** From now on, new connections are reset as soon as they arrive. */
  pause(): void;
  resume(): void;
  close(): Promise<void>;
}

export async function startTcpProxy(target: { host: string; port: number }): Promise<TcpProxy> {
  const pairs = new Set<{ client: net.Socket; upstream: net.Socket }>();
  let paused = false;
  let armed: { matches: (columns: string[]) => boolean; lost: () => void } | null = null;
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
    relayAnswers(upstream, client, (columns) => {
      if (!armed?.matches(columns)) return null;
      // This connection takes the loss: another one matching meanwhile is relayed as usual.
      const { lost } = armed;
      armed = null;
      return () => {
        drop();
        lost();
      };
    });
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
    loseAnswer(matches) {
      return new Promise((lost) => {
        armed = { matches, lost };
      });
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

/**
 * Relays the server's side of a PostgreSQL connection message by message: a type byte and a
 * length that counts itself, the shape of every message a server sends after a start-up without
 * TLS (the clients of these tests never ask for it; a TLS answer would be one bare byte). Once
 * `takeLoss` accepts a RowDescription's columns, nothing more is relayed, and at the
 * ReadyForQuery that ends its statement the returned `lose` cuts the connection.
 */
function relayAnswers(
  upstream: net.Socket,
  client: net.Socket,
  takeLoss: (columns: string[]) => (() => void) | null,
): void {
  let buffered = Buffer.alloc(0);
  let lose: (() => void) | null = null;
  upstream.on('data', (chunk: Buffer) => {
    buffered = Buffer.concat([buffered, chunk]);
    while (buffered.length >= 5) {
      const end = 1 + buffered.readInt32BE(1);
      if (buffered.length < end) break;
      const type = String.fromCharCode(buffered[0]!);
      if (lose === null && type === 'T') lose = takeLoss(columnsOf(buffered.subarray(5, end)));
      if (lose === null) client.write(buffered.subarray(0, end));
      else if (type === 'Z') return lose();
      buffered = buffered.subarray(end);
    }
  });
  upstream.on('end', () => client.end());
}

/** The column names of a RowDescription's body. */
function columnsOf(body: Buffer): string[] {
  const names: string[] = [];
  let at = 2;
  for (let i = 0; i < body.readInt16BE(0); i++) {
    const nul = body.indexOf(0, at);
    names.push(body.toString('utf8', at, nul));
    // After the name: table oid, column number, type oid, type size, modifier, format.
    at = nul + 1 + 18;
  }
  return names;
}
