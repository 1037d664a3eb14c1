// The gaps between ztunnel connections (a rollout or a crash-restart: the old connection closes,
// the new one connects a second or two later) and the pod adds that waited through them. A gap
// opens when the last connection closes and ends when the next one is accepted; once it has
// ended and every add that waited in it has settled, it is reported in one log line.
import type { Logger } from '../ops/log.js';

/** Called once per add that waited, with how long it waited and whether ztunnel acked it in time. */
export type WaitObserver = (seconds: number, enrolled: boolean) => void;

interface Gap {
  /** When the last connection closed; undefined: before any ztunnel connected. */
  lostAt: bigint | undefined;
  endedAt: bigint | undefined;
  /** No gap at all: the newest connection died but an older one was still there. */
  handedOver: boolean;
  waited: number;
  failed: number;
  pending: number;
}

/** One add waiting for ztunnel; done() exactly once. */
export interface GapWaiter {
  done(enrolled: boolean): void;
}

const now = (): bigint => process.hrtime.bigint();
const msBetween = (from: bigint, to: bigint): number => Math.round(Number(to - from) / 1e6);

export class ZtunnelGaps {
  /** No connection now: the adds that begin wait in this gap. Before the first connection too. */
  #open: Gap | undefined = newGap(undefined);
  /** A gap that ended while adds in it were still settling (reported once they have). */
  #settling: Gap | undefined;
  #connections = 0;

  constructor(
    private readonly log: Logger,
    private readonly onWaited: WaitObserver = () => {},
  ) {}

  /** The number of live connections changed (after an accept or a close). */
  connectionCount(count: number): void {
    const before = this.#connections;
    this.#connections = count;
    if (before > 0 && count === 0) this.#open = newGap(now());
    if (before === 0 && count > 0 && this.#open) {
      const gap = this.#open;
      this.#open = undefined;
      gap.endedAt = now();
      this.#settling = gap;
      this.#reportWhenSettled(gap);
    }
  }

  /**
   * An add starts waiting for ztunnel. It counts in the open gap; when a connection is there
   * (the add's own connection died but an older one lives), in a gap that ended at once.
   */
  begin(): GapWaiter {
    const gap = this.#open ?? this.#settling ?? this.#instantGap();
    const started = now();
    gap.waited++;
    gap.pending++;
    let settled = false;
    return {
      done: (enrolled) => {
        if (settled) return;
        settled = true;
        gap.pending--;
        if (!enrolled) gap.failed++;
        this.onWaited(Number(now() - started) / 1e9, enrolled);
        this.#reportWhenSettled(gap);
      },
    };
  }

  #instantGap(): Gap {
    const t = now();
    const gap = newGap(t);
    gap.endedAt = t;
    gap.handedOver = true;
    this.#settling = gap;
    return gap;
  }

  #reportWhenSettled(gap: Gap): void {
    if (gap.endedAt === undefined || gap.pending > 0) return;
    if (this.#settling === gap) this.#settling = undefined;
    // Before the first connection there was no ztunnel to lose: only worth a line when adds waited.
    if (gap.lostAt === undefined && gap.waited === 0) return;
    const enrolled = gap.waited - gap.failed;
    const outcome =
      gap.waited === 0
        ? 'no pod waited'
        : `${gap.waited} ${gap.waited === 1 ? 'pod' : 'pods'} waited, ${gap.failed === 0 ? 'all enrolled' : `${enrolled} enrolled, ${gap.failed} failed closed`}`;
    const goneMs = gap.lostAt === undefined ? undefined : msBetween(gap.lostAt, gap.endedAt);
    const line = gap.handedOver
      ? `ztunnel connection lost with adds in flight, an older connection took them: ${outcome}`
      : goneMs === undefined
        ? `ztunnel connected for the first time, ${outcome}`
        : `ztunnel gone for ${goneMs} ms, ${outcome}`;
    const fields = { goneMs, waited: gap.waited, enrolled, failed: gap.failed };
    if (gap.failed > 0) this.log.warn(fields, line);
    else this.log.info(fields, line);
  }
}

function newGap(lostAt: bigint | undefined): Gap {
  return { lostAt, endedAt: undefined, handedOver: false, waited: 0, failed: 0, pending: 0 };
}
