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
   * Arms a one-shot loss of an answer whose statement committed: while armed, each answer with a
   * RowDescription is held back until the ReadyForQuery that ends it, so that `matches` sees its
   * rows. The next one that ended outside a transaction without an error (an autocommit statement
   * that committed) and that `matches` accepts is dropped whole and its connection cut; any other
   * is relayed then. Resolves once it happened.
   */
  loseAnswer(matches: (answer: Answer) => boolean): Promise<void>;
  /**
   * Arms a one-shot silence: the next client message that holds `marker` (a prepared statement's
   * name, say) is swallowed, never reaching the server, and its connection goes silent both ways
   * without a reset, as behind a peer gone unannounced (a failover, a NAT's timeout). Resolves
   * once it happened.
   */
  silenceRequest(marker: string): Promise<void>;
  /**
   * Every live connection goes silent both ways without a reset, as `silenceRequest`'s does: the
   * client hears nothing more, not even the close that answers its own (a peer that is gone).
   */
  silenceAll(): void;
  /** From now on, new connections are reset as soon as they arrive. */
  pause(): void;
  resume(): void;
  close(): Promise<void>;
}

/** An answer as the proxy saw it, from its RowDescription to its ReadyForQuery. */
export interface Answer {
  /** The columns of its (last) RowDescription. */
  columns: string[];
  /** Each row's values as text (or null), by the names of its own statement's columns. */
  rows: Record<string, string | null>[];
  /** An ErrorResponse came with it. */
  failed: boolean;
  /** ReadyForQuery's transaction status: 'I' idle (an autocommit statement ended), 'T' in a transaction, 'E' failed one. */
  status: string;
}

export async function startTcpProxy(target: { host: string; port: number }): Promise<TcpProxy> {
  const pairs = new Set<{ client: net.Socket; upstream: net.Socket; silence: () => void }>();
  let paused = false;
  let armed: { matches: (answer: Answer) => boolean; lost: () => void } | null = null;
  let silencing: { marker: Buffer; silenced: () => void } | null = null;
  let connectionAttempts = 0;
  let refused = 0;

  // Half-open allowed, so that a silent connection can leave a client's FIN unanswered; the others
  // pass it on to the server, whose close comes back to the client.
  const server = net.createServer({ allowHalfOpen: true }, (client) => {
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
    let silent = false;
    const drop = () => {
      pairs.delete(pair);
      client.destroy();
      upstream.destroy();
    };
    // Open, and nothing more goes through either way: the client hears nothing, ever.
    const silence = () => {
      silent = true;
      upstream.removeAllListeners('data');
      upstream.removeAllListeners('end');
      upstream.off('close', drop);
    };
    const pair = { client, upstream, silence };
    pairs.add(pair);
    client.on('close', drop);
    upstream.on('close', drop);
    client.on('end', () => {
      // A silent connection's server session ends with the client's (its locks with it); the
      // client is left waiting for an answer to its close.
      if (silent) upstream.destroy();
      else upstream.end();
    });
    client.on('data', (chunk: Buffer) => {
      if (silent) return;
      if (silencing !== null && chunk.includes(silencing.marker)) {
        const { silenced } = silencing;
        silencing = null;
        silence();
        silenced();
        return;
      }
      upstream.write(chunk);
    });
    relayAnswers(
      upstream,
      client,
      () => armed !== null,
      (answer) => {
        if (answer.failed || answer.status !== 'I' || !armed?.matches(answer)) return false;
        // This connection takes the loss: another one matching meanwhile is relayed as usual.
        const { lost } = armed;
        armed = null;
        drop();
        lost();
        return true;
      },
    );
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
    silenceRequest(marker) {
      return new Promise((silenced) => {
        silencing = { marker: Buffer.from(marker), silenced };
      });
    },
    silenceAll() {
      for (const pair of pairs) pair.silence();
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
 * TLS (the clients of these tests never ask for it; a TLS answer would be one bare byte). While
 * `holding()` says so, each answer with a RowDescription is held back up to its ReadyForQuery and
 * offered to `takeLoss`, which either cuts the connection or has the answer relayed; messages the
 * server sends unasked meanwhile (notifications, notices, parameter changes) wait with it. Values
 * are read as text, the format these tests' clients ask for.
 */
function relayAnswers(
  upstream: net.Socket,
  client: net.Socket,
  holding: () => boolean,
  takeLoss: (answer: Answer) => boolean,
): void {
  let buffered = Buffer.alloc(0);
  let held: { answer: Answer; messages: Buffer[] } | null = null;
  upstream.on('data', (chunk: Buffer) => {
    buffered = Buffer.concat([buffered, chunk]);
    while (buffered.length >= 5) {
      const end = 1 + buffered.readInt32BE(1);
      if (buffered.length < end) break;
      const message = buffered.subarray(0, end);
      buffered = buffered.subarray(end);
      const type = String.fromCharCode(message[0]!);
      const body = message.subarray(5);
      if (held === null && type === 'T' && holding()) {
        held = { answer: { columns: [], rows: [], failed: false, status: '' }, messages: [] };
      }
      if (held === null) {
        client.write(message);
        continue;
      }
      held.messages.push(message);
      if (type === 'T') held.answer.columns = columnsOf(body);
      else if (type === 'D') held.answer.rows.push(rowOf(held.answer.columns, body));
      else if (type === 'E') held.answer.failed = true;
      else if (type === 'Z') {
        held.answer.status = String.fromCharCode(body[0]!);
        if (takeLoss(held.answer)) return;
        client.write(Buffer.concat(held.messages));
        held = null;
      }
    }
  });
  upstream.on('end', () => {
    // What the server said before it closed (a FATAL error, say) still reaches the client.
    if (held !== null) client.write(Buffer.concat(held.messages));
    held = null;
    client.end();
  });
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

/** A DataRow's values by column name: each a length (-1: NULL) and its bytes. */
function rowOf(columns: string[], body: Buffer): Record<string, string | null> {
  const row: Record<string, string | null> = {};
  let at = 2;
  for (let i = 0; i < body.readInt16BE(0); i++) {
    const length = body.readInt32BE(at);
    at += 4;
    row[columns[i]!] = length < 0 ? null : body.toString('utf8', at, at + length);
    at += Math.max(0, length);
  }
  return row;
}
