/**
 * What the status indicator shows, and how often it asks.
 *
 * Pure functions only (no JupyterLab imports), so they are unit-tested as they are.
 */
import vocabulary from './vocabulary.json';

/**
 * A session's states, as the server names them (generated from `jupyter_pause/vocabulary.py`).
 */
export const SessionState = vocabulary.SessionState;

/**
 * A session's state, as `GET /jupyter-pause/api/status?path=` returns it.
 */
export interface IPauseStatus {
  session: string;
  /** ready | checkpointing | paused | waiting | restoring | failed */
  state: string;
  detail: string;
  path: string | null;
  node: string;
  checkpoint: string | null;
  verdict: string | null;
  /** Seconds since the epoch. */
  updated: number;
  moments?: { [name: string]: number };
  /** The id of the release that paused the session, if one did. */
  release?: string | null;
  /** The kernelspec the session's kernel ran on (a resume starts it); null: none recorded. */
  kernel?: string | null;
}

/**
 * One row of `GET /jupyter-pause/api/sessions`.
 */
export interface ISessionRow {
  session: string;
  state: string;
  detail: string;
  path: string | null;
  node: string | null;
  checkpoint: string | null;
  /** When the newest checkpoint was taken, seconds since the epoch. */
  created: number | null;
  bytes: number;
  updated: number | null;
  /** The id of the release that paused the session ("Pause all and stop server"), if one did. */
  release?: string | null;
  /** When the session's kernel stopped for its pause (from the ledger), seconds since the epoch. */
  paused_since?: number | null;
  /** GPU-hours its pause has given back so far: GPUs its kernel held x time paused; null: unknown. */
  gpu_hours_released?: number | null;
  /** Its damaged checkpoints (checksum, signature, torn write...), newest first; a resume skips them. */
  damaged?: IDamagedCheckpoint[];
}

/**
 * A checkpoint the store holds but no resume will use, and why.
 */
export interface IDamagedCheckpoint {
  checkpoint: string;
  why: string;
}

/**
 * The answer of `GET /jupyter-pause/api/sessions`.
 */
export interface ISessionsReply {
  sessions: ISessionRow[];
  node: string;
  /** Whether opening a paused session's notebook resumes it (c.PauseServer.resume_on_open). */
  resume_on_open?: boolean;
}

/**
 * The answer of `POST /jupyter-pause/api/pull`.
 */
export interface IPullReply {
  path: string;
  session: string;
  checkpoint: string;
  written: boolean;
}

/**
 * States in which the server is working on the session; the indicator polls fast then.
 */
export const BUSY_STATES: ReadonlyArray<string> = vocabulary.BUSY_STATES;

/**
 * Poll interval while the server is working on the session (ms).
 */
export const FAST_INTERVAL = 1000;

/**
 * Poll interval otherwise (ms).
 */
export const SLOW_INTERVAL = 5000;

/**
 * The longest a failing poll backs off to (ms).
 */
export const MAX_INTERVAL = 60000;

/**
 * Whether the server is in the middle of pausing or resuming the session.
 */
export function isBusy(state: string | null | undefined): boolean {
  return !!state && BUSY_STATES.includes(state);
}

/**
 * How long to wait before asking again, given the last known state.
 */
export function pollInterval(state: string | null | undefined): number {
  return isBusy(state) ? FAST_INTERVAL : SLOW_INTERVAL;
}

/**
 * The indicator's text for a status.
 *
 * - `ready`, or `ready · <verdict> (<checkpoint>)` once a resume has given a verdict
 * - `checkpointing`
 * - `paused`
 * - `waiting for resources: <detail>`
 * - `restoring`
 * - `failed: <detail>`
 */
export function formatStatus(status: IPauseStatus): string {
  const detail = (status.detail || '').trim();
  switch (status.state) {
    case SessionState.READY: {
      if (!status.verdict) {
        return 'ready';
      }
      const checkpoint = status.checkpoint ? ` (${status.checkpoint})` : '';
      return `ready · ${status.verdict}${checkpoint}`;
    }
    case SessionState.CHECKPOINTING:
    case SessionState.PAUSED:
    case SessionState.RESTORING:
      return status.state;
    case SessionState.WAITING:
      return detail
        ? `waiting for resources: ${detail}`
        : 'waiting for resources';
    case SessionState.FAILED:
      return detail ? `failed: ${detail}` : 'failed';
    default:
      return detail ? `${status.state}: ${detail}` : status.state;
  }
}

/**
 * The indicator's text when the status could not be read.
 */
export function formatError(message: string): string {
  return `status unavailable: ${message}`;
}

/**
 * The indicator's tooltip: everything the server said, one fact a line.
 */
export function describeStatus(status: IPauseStatus): string {
  const lines = [`session ${status.session}: ${status.state}`];
  if (status.detail) {
    lines.push(status.detail);
  }
  if (status.checkpoint) {
    lines.push(`checkpoint ${status.checkpoint}`);
  }
  if (status.verdict) {
    lines.push(`verdict ${status.verdict}`);
  }
  if (status.node) {
    lines.push(`node ${status.node}`);
  }
  if (status.updated) {
    lines.push(`since ${formatTime(status.updated)}`);
  }
  return lines.join('\n');
}

/**
 * A byte count the way the Python side prints it (``jupyter_pause.units.size``): decimal
 * units, short figures: 0 B, 150 kB, 1.5 MB, 12 GB.
 */
export function formatBytes(n: number | null | undefined): string {
  let value = Math.max(0, Number(n) || 0);
  let unit = 'B';
  for (const bigger of ['kB', 'MB', 'GB', 'TB', 'PB']) {
    if (Math.round(value) < 1000) {
      break;
    }
    value /= 1000;
    unit = bigger;
  }
  if (unit === 'B' || Number(value.toFixed(1)) >= 10) {
    return `${value.toFixed(0)} ${unit}`;
  }
  return `${value.toFixed(1)} ${unit}`;
}

function pad(n: number): string {
  return n < 10 ? `0${n}` : `${n}`;
}

/**
 * Seconds since the epoch as local `YYYY-MM-DD HH:MM`; an empty string for none.
 */
export function formatTime(epoch: number | null | undefined): string {
  if (epoch === null || epoch === undefined || !isFinite(epoch)) {
    return '';
  }
  const d = new Date(epoch * 1000);
  return (
    `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} ` +
    `${pad(d.getHours())}:${pad(d.getMinutes())}`
  );
}

/**
 * How long ago, coarsely: `just now`, `5 min ago`, `3 h ago`, `2 days ago`.
 */
export function formatAge(epoch: number | null | undefined, now: number = Date.now() / 1000): string {
  if (epoch === null || epoch === undefined || !isFinite(epoch)) {
    return '';
  }
  const seconds = Math.max(0, now - epoch);
  if (seconds < 60) {
    return 'just now';
  }
  if (seconds < 3600) {
    return `${Math.floor(seconds / 60)} min ago`;
  }
  if (seconds < 86400) {
    return `${Math.floor(seconds / 3600)} h ago`;
  }
  const days = Math.floor(seconds / 86400);
  return days === 1 ? '1 day ago' : `${days} days ago`;
}

/**
 * How long something has lasted, to the minute: `2 min`, `3 h 5 min`, `2 days 4 h`.
 */
export function formatDuration(seconds: number): string {
  const minutes = Math.floor(Math.max(0, seconds) / 60);
  if (minutes < 60) {
    return `${minutes} min`;
  }
  const hours = Math.floor(minutes / 60);
  if (hours < 24) {
    return minutes % 60 ? `${hours} h ${minutes % 60} min` : `${hours} h`;
  }
  const days = Math.floor(hours / 24);
  const rest = hours % 24 ? ` ${hours % 24} h` : '';
  return `${days} ${days === 1 ? 'day' : 'days'}${rest}`;
}

/**
 * GPU-hours for a person: `0.05 GPU-h`, `2.4 GPU-h`, `130 GPU-h`; unknown when null.
 */
export function formatGpuHours(hours: number | null | undefined): string {
  if (hours === null || hours === undefined || !isFinite(hours)) {
    return 'GPU-h unknown';
  }
  const digits = hours < 1 ? 2 : hours < 10 ? 1 : 0;
  return `${Number(hours.toFixed(digits))} GPU-h`;
}

/**
 * What the panel says of a paused session's pause: how long, and what it gave back; '' when the
 * row is not paused or its pause time is unknown.
 */
export function formatPause(row: ISessionRow, now: number = Date.now() / 1000): string {
  if (row.state !== SessionState.PAUSED || row.paused_since === null || row.paused_since === undefined) {
    return '';
  }
  const hours = row.gpu_hours_released;
  const known = hours !== null && hours !== undefined;
  const released = known ? `${formatGpuHours(hours)} released` : formatGpuHours(hours);
  return `paused ${formatDuration(now - row.paused_since)} · ${released}`;
}

/**
 * What the panel says of a row's damaged checkpoints: [label, tooltip], or null when it has
 * none. The tooltip names each one and why, then which checkpoint a resume uses instead.
 */
export function formatDamage(row: ISessionRow): [string, string] | null {
  const damaged = row.damaged ?? [];
  if (!damaged.length) {
    return null;
  }
  const label = row.checkpoint
    ? `${damaged.length} damaged checkpoint${damaged.length > 1 ? 's' : ''}`
    : 'every checkpoint damaged';
  const named = damaged.map(d => `checkpoint ${d.checkpoint} is damaged: ${d.why}`);
  const then = row.checkpoint
    ? `a resume uses ${row.checkpoint}, the newest intact checkpoint`
    : 'nothing to resume: take a new checkpoint (%checkpoint)';
  return [label, [...named, then].join('\n')];
}

/**
 * Whether the panel's "Pull & resume" applies to a row: it has a checkpoint and no kernel
 * holds the session (paused, or a pause or resume that failed).
 */
export function canPullAndResume(row: ISessionRow): boolean {
  return (
    !!row.checkpoint && (row.state === SessionState.PAUSED || row.state === SessionState.FAILED)
  );
}

/**
 * Order for the panel: paused sessions first, then newest checkpoint first.
 */
export function sortRows(rows: ReadonlyArray<ISessionRow>): ISessionRow[] {
  const rank = (row: ISessionRow): number => (row.state === SessionState.PAUSED ? 0 : 1);
  return [...rows].sort(
    (a, b) =>
      rank(a) - rank(b) ||
      (b.created ?? 0) - (a.created ?? 0) ||
      a.session.localeCompare(b.session)
  );
}
