// Answering a caller before its own deadline while the work carries on: the plugin gives up on
// the agent after 5 s and then reports an unreachable agent, which hides the real cause.
export interface AnswerWithinOptions {
  ms: number;
  /** The error to answer with when `work` is still running after `ms`. */
  late: () => Error;
  /** How the work ended after the answer went out (logging). */
  settledLate?: (err: unknown) => void;
}

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
