// SOCK_SEQPACKET sockets on Node's event loop: readiness comes from uv_poll (no thread per
// connection), reads and writes are non-blocking syscalls in the addon, deadlines are timers.
import { loadRawAddon, type RawAddon, type RawDatagram, type RawFdPoller } from './binding.js';
import { systemError } from './errors.js';

export type Datagram = RawDatagram;

export interface SeqpacketHandlers {
  /** Every datagram (or EOF) as it arrives, in order. */
  onDatagram(datagram: Datagram): void;
  /** The socket failed (poll error, recvmsg error); it is already closed. */
  onError(err: Error): void;
}

const noHandlers: SeqpacketHandlers = { onDatagram: () => {}, onError: () => {} };

function timeoutError(op: string, ms: number): Error {
  return systemError('ETIMEDOUT', -110, op, `ETIMEDOUT: no ${op} within ${ms} ms`);
}

/** Something that holds an fd to pass (read when the datagram is written). */
export interface PassedFd {
  readonly fd: number;
  readonly closed?: boolean;
}

export class SeqpacketSocket {
  #poller: RawFdPoller;
  #closed = false;
  #writeWaiters: Array<() => void> = [];
  handlers: SeqpacketHandlers = noHandlers;

  constructor(
    readonly fd: number,
    private readonly raw: RawAddon = loadRawAddon(),
  ) {
    this.#poller = new raw.FdPoller(fd, (status, events) => this.#onPoll(status, events));
    this.#watch();
  }

  get closed(): boolean {
    return this.#closed;
  }

  static connect(path: string, raw: RawAddon = loadRawAddon()): SeqpacketSocket {
    return new SeqpacketSocket(raw.seqpacketConnect(path), raw);
  }

  /**
   * Sends one datagram (with at most one fd), waiting up to `timeoutMs` for buffer space. An fd
   * given as a holder is read at each attempt (a netns handle may change the fd that holds its
   * namespace while the send waits), and refused once the holder is closed.
   */
  async send(data: Uint8Array, pass: number | PassedFd | undefined, timeoutMs: number): Promise<void> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      if (this.#closed) throw systemError('EPIPE', -32, 'sendmsg', 'EPIPE: socket closed');
      if (typeof pass === 'object' && pass.closed) throw systemError('EBADF', -9, 'sendmsg', 'EBADF: the fd to pass was closed');
      const fd = pass === undefined ? -1 : typeof pass === 'number' ? pass : pass.fd;
      if (this.raw.seqpacketSend(this.fd, data, fd)) return;
      const left = deadline - Date.now();
      if (left <= 0) throw timeoutError('sendmsg', timeoutMs);
      await this.#writable(left);
    }
  }

  /** Closes an fd that arrived in SCM_RIGHTS and that nobody wants. */
  closeForeignFd(fd: number): void {
    this.raw.closeFd(fd);
  }

  /** Keeps the process alive while this socket is open (default), or not. */
  setKeepAlive(keep: boolean): void {
    if (keep) this.#poller.ref();
    else this.#poller.unref();
  }

  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    this.#poller.close(); // libuv: stop polling before the fd is closed
    this.raw.closeFd(this.fd);
    for (const wake of this.#writeWaiters.splice(0)) wake();
  }

  #watch(): void {
    const { readable, writable, disconnect } = this.raw.pollEvents;
    this.#poller.start(readable | disconnect | (this.#writeWaiters.length > 0 ? writable : 0));
  }

  #writable(timeoutMs: number): Promise<void> {
    return new Promise((resolve) => {
      const timer = setTimeout(done, timeoutMs);
      function done(): void {
        clearTimeout(timer);
        resolve();
      }
      this.#writeWaiters.push(done);
      this.#watch();
    });
  }

  #onPoll(status: number, events: number): void {
    if (this.#closed) return;
    if (status < 0) return this.#fail(systemError('EIO', status, 'uv_poll', `poll failed on fd ${this.fd} (${status})`));
    if (events & this.raw.pollEvents.writable) {
      for (const wake of this.#writeWaiters.splice(0)) wake();
      this.#watch();
    }
    if (events & (this.raw.pollEvents.readable | this.raw.pollEvents.disconnect)) this.#drain();
  }

  #drain(): void {
    while (!this.#closed) {
      let datagram: Datagram | null;
      try {
        datagram = this.raw.seqpacketRecv(this.fd);
      } catch (err) {
        return this.#fail(err as Error);
      }
      if (datagram === null) return;
      this.handlers.onDatagram(datagram);
      if (datagram.eof) return;
    }
  }

  #fail(err: Error): void {
    this.close();
    this.handlers.onError(err);
  }
}

export interface ListenOptions {
  /** Permissions of the socket file (default 0600: only root may connect). */
  mode?: number;
  dirMode?: number;
  backlog?: number;
  /**
   * Bind and listen, but accept nothing until resume(): peers can connect (the kernel queues
   * them in the backlog) while the owner gets ready to serve them.
   */
  paused?: boolean;
}

export class SeqpacketListener {
  #poller: RawFdPoller;
  #closed = false;

  private constructor(
    readonly path: string,
    readonly fd: number,
    private readonly raw: RawAddon,
    /** Gets each accepted connection; may be replaced before resume() (a paused listener handed over). */
    public onConnection: (socket: SeqpacketSocket) => void,
    paused: boolean,
  ) {
    this.#poller = new raw.FdPoller(fd, (status) => {
      if (this.#closed || status < 0) return;
      for (let next = raw.seqpacketAccept(fd); next !== null; next = raw.seqpacketAccept(fd)) {
        this.onConnection(new SeqpacketSocket(next, raw));
      }
    });
    if (!paused) this.resume();
  }

  /** Starts accepting (a no-op when already accepting). */
  resume(): void {
    if (!this.#closed) this.#poller.start(this.raw.pollEvents.readable);
  }

  /** Removes a stale socket file, creates missing directories, binds with `mode`, listens. */
  static listen(
    path: string,
    onConnection: (socket: SeqpacketSocket) => void,
    options: ListenOptions = {},
    raw = loadRawAddon(),
  ): SeqpacketListener {
    const fd = raw.seqpacketListen(path, {
      mode: options.mode ?? 0o600,
      dirMode: options.dirMode ?? 0o755,
      backlog: options.backlog ?? 16,
    });
    return new SeqpacketListener(path, fd, raw, onConnection, options.paused ?? false);
  }

  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    this.#poller.close();
    this.raw.closeFd(this.fd);
  }
}
