import { connect } from 'node:net';

/** What {@link rawExchange} saw on its connection. */
export interface RawExchange {
  /** Status of the first answer; 0 when none came. */
  status: number;
  /** Headers of the first answer, names lower-cased. */
  headers: Record<string, string>;
  /** Everything after the first answer's head (latin1). */
  body: string;
  /** From the first byte written to the first answer byte read (or to the end when none came), ms. */
  answeredAfterMs: number;
  /** The server closed the connection (FIN or reset) before `waitMs` ran out. */
  closedByServer: boolean;
}

/**
 * Writes `chunks` byte for byte on a fresh TCP connection to `127.0.0.1:port`, `gapMs` apart (a
 * client that trickles), then keeps the connection open without writing (a client that stalls)
 * until the server closes it or `waitMs` passes since the first write; never throws (a reset is a
 * close). For requests Node's own client will not send, or not slowly.
 */
export function rawExchange(
  port: number,
  chunks: Array<string | Buffer>,
  opts: { gapMs?: number; waitMs?: number } = {},
): Promise<RawExchange> {
  const started = Date.now();
  return new Promise((resolve) => {
    const socket = connect(port, '127.0.0.1');
    const read: Buffer[] = [];
    let firstByteMs: number | undefined;
    let writer: NodeJS.Timeout | undefined;
    const finish = (closedByServer: boolean): void => {
      clearTimeout(timer);
      clearTimeout(writer);
      socket.destroy();
      resolve({
        ...parseAnswer(Buffer.concat(read).toString('latin1')),
        answeredAfterMs: firstByteMs ?? Date.now() - started,
        closedByServer,
      });
    };
    const timer = setTimeout(() => finish(false), opts.waitMs ?? 10_000);
    socket.on('data', (c: Buffer) => {
      firstByteMs ??= Date.now() - started;
      read.push(c);
    });
    socket.on('error', () => undefined); // a reset ends in 'close'
    socket.on('close', () => finish(true));
    let next = 0;
    const writeNext = (): void => {
      if (next >= chunks.length || socket.destroyed) return;
      socket.write(chunks[next++]!);
      writer = setTimeout(writeNext, opts.gapMs ?? 0);
    };
    socket.once('connect', writeNext);
  });
}

/** The first answer of `text`: status, headers and what follows its head. */
function parseAnswer(text: string): Pick<RawExchange, 'status' | 'headers' | 'body'> {
  const end = text.indexOf('\r\n\r\n');
  const m = /^HTTP\/1\.[01] (\d{3})/.exec(text);
  if (!m || end < 0) return { status: 0, headers: {}, body: '' };
  const headers: Record<string, string> = {};
  for (const line of text.slice(0, end).split('\r\n').slice(1)) {
    const at = line.indexOf(':');
    if (at > 0) headers[line.slice(0, at).trim().toLowerCase()] = line.slice(at + 1).trim();
  }
  return { status: Number(m[1]), headers, body: text.slice(end + 4) };
}
