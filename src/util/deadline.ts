// Deadlines on promises: giving up on work (withDeadline), or answering a caller in time while
// the work carries on (answerWithin).

/** Rejects with "<what>: no result within <ms> ms" when `promise` does not settle in time. */
export function withDeadline<T>(promise: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const deadline = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what}: no result within ${ms} ms`)), ms);
  });
  return Promise.race([promise, deadline]).finally(() => clearTimeout(timer));
}

export interface AnswerWithinOptions {
  ms: number;
  /** The error to answer with when `work` is still running after `ms`. */
  late: () => Error;
  /** How the work ended after the answer went out (logging). */
  settledLate?: (err: unknown) => void;
}

/** `work`'s outcome, or `late()` after `ms` while `work` carries on (its outcome then goes to settledLate). */
export function answerWithin<T>(work: Promise<T>, opts: AnswerWithinOptions): Promise<T> {
  return new Promise<T>((resolve, reject) => {
    const timer = setTimeout(() => {
      reject(opts.late());
      work.then(
        () => opts.settledLate?.(undefined),
        (err: unknown) => opts.settledLate?.(err),
      );
    }, opts.ms);
    work.then(
      (value) => {
        clearTimeout(timer);
        resolve(value);
      },
      (err: unknown) => {
        clearTimeout(timer);
        reject(err as Error);
      },
    );
  });
}
