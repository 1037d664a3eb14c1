// ZDS failures carry whether retrying later can help: a missing, slow or unhappy ztunnel is
// retryable (the pod stays registered and goes out with the next snapshot); a message that can
// never be sent is not.
export type ZdsErrorCode =
  | 'ZDS_NO_CONNECTION'
  | 'ZDS_ACK_TIMEOUT'
  | 'ZDS_ACK_ERROR'
  | 'ZDS_WRITE_TIMEOUT'
  | 'ZDS_CONNECTION_CLOSED'
  | 'ZDS_MESSAGE_TOO_LARGE'
  | 'ZDS_INVALID_MESSAGE'
  | 'ZDS_MALFORMED'
  | 'ZDS_PROTOCOL';

export class ZdsError extends Error {
  override readonly name = 'ZdsError';
  constructor(
    readonly code: ZdsErrorCode,
    message: string,
    readonly retryable: boolean,
    options?: { cause?: unknown },
  ) {
    super(message, options);
  }
}

export function isRetryable(err: unknown): boolean {
  return err instanceof ZdsError && err.retryable;
}
