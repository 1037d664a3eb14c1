// Errors from the addon are shaped like Node's own system errors, so callers match on
// `code` (never on message text), exactly as they would for an `fs` error.

export interface SystemError extends Error {
  code: string;
  errno: number;
  syscall: string;
  path?: string;
  /** Extra text from the library that failed, for example nft's own error message. */
  detail?: string;
  /** For errors from a step list: the index of the failed step (-1: entering the netns failed). */
  step?: number;
  op?: string;
}

export function isSystemError(err: unknown): err is SystemError {
  return (
    err instanceof Error &&
    typeof (err as Partial<SystemError>).code === 'string' &&
    typeof (err as Partial<SystemError>).syscall === 'string'
  );
}

export function hasErrorCode(err: unknown, ...codes: string[]): boolean {
  return isSystemError(err) && codes.includes(err.code);
}

export function systemError(code: string, errno: number, syscall: string, message: string, path?: string): SystemError {
  const err = new Error(message) as SystemError;
  err.code = code;
  err.errno = errno;
  err.syscall = syscall;
  if (path !== undefined) err.path = path;
  return err;
}
