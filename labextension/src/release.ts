/**
 * What a release ("Pause all and stop server") is, and how the status indicator words it.
 *
 * Pure functions only (no JupyterLab imports), so they are unit-tested as they are.
 */
import { IPreemption } from './preemption';
import { IPauseStatus, SessionState } from './status';
import vocabulary from './vocabulary.json';

/**
 * A release's states, as the server names them (generated from `jupyter_pause/vocabulary.py`).
 */
export const ReleaseState = vocabulary.ReleaseState;

/**
 * One session of a release, as `Release.sessions[]` gives it.
 */
export interface IReleaseSession {
  path: string;
  session: string;
  /** checkpointing | paused | failed */
  state: string;
  detail: string;
  checkpoint: string | null;
}

/**
 * A release, as `POST /jupyter-pause/api/release` and the server's status return it.
 */
export interface IRelease {
  id: string;
  /** pausing | stopping | stopped | paused | failed */
  state: string;
  /** null | stopped | no-hub | missing-scope | hub-refused */
  server_stop: string | null;
  /** One sentence for a person (names c.Spawner.server_token_scopes when a scope is missing). */
  detail: string;
  /** button | service | idle | sigterm */
  trigger: string;
  started: number;
  updated: number;
  sessions: IReleaseSession[];
}

/**
 * A notebook session with a kernel on this server now.
 */
export interface INotebookSession {
  path: string;
  session: string;
  /** The kernel's execution state: idle, busy, starting... */
  kernel_state: string;
}

/**
 * The answer of `GET /jupyter-pause/api/status` without a path: the server's own status.
 */
export interface IServerStatus {
  node: string;
  store: string;
  lease: string;
  hub: { user: string; server_name: string } | null;
  resume_on_open: boolean;
  sessions: INotebookSession[];
  release: IRelease | null;
  /** The pause service's warning of a coming release, or null (absent: an older server). */
  warning?: IReleaseWarning | null;
  /** The preemption watcher, or null when it is off (absent: an older server). */
  preemption?: IPreemption | null;
}

/**
 * The Hub's pause service warned that it will release this server (`GET
 * /jupyter-pause/api/release/warning`, and the server's status).
 */
export interface IReleaseWarning {
  /** Why, as the service says it: `idle for 2.0 h`. */
  reason: string;
  /** Seconds since the epoch (the server's clock). */
  warned_at: number;
  release_at: number;
  idle_for: number | null;
  /** Seconds to the release when the server answered: the countdown starts from it. */
  seconds_left: number;
}

/**
 * A countdown as a clock shows it: `4:59`, `1:02:03` (never below `0:00`).
 */
export function formatCountdown(seconds: number): string {
  const total = Math.max(0, Math.ceil(seconds));
  const h = Math.floor(total / 3600);
  const m = Math.floor((total % 3600) / 60);
  const s = total % 60;
  const ss = s < 10 ? `0${s}` : `${s}`;
  if (h > 0) {
    return `${h}:${m < 10 ? `0${m}` : m}:${ss}`;
  }
  return `${m}:${ss}`;
}

/**
 * What the warning's notification says, `secondsLeft` before the release.
 */
export function warningMessage(warning: IReleaseWarning, secondsLeft: number): string {
  const when =
    secondsLeft > 0 ? `will be paused in ${formatCountdown(secondsLeft)}` : 'is being paused now';
  const why = warning.reason ? ` (${warning.reason})` : '';
  return (
    `This server ${when}${why}. ` +
    'Your notebooks are saved and come back with Resume.'
  );
}

/**
 * What the front end's page config says about a Hub (`hubUser`, `hubPrefix`).
 */
export interface IPageHub {
  hubUser?: string;
  hubPrefix?: string;
}

/**
 * Release states in which the server is still working; it is polled fast then.
 */
export const RELEASE_ACTIVE_STATES: ReadonlyArray<string> = vocabulary.RELEASE_ACTIVE_STATES;

/**
 * The state the front end gives a release whose server stopped answering while it ran: the
 * Hub stops the server moments after it accepts, often before a poll sees `stopped`.
 */
export const LOST = 'lost';

/**
 * A release as the front end shows it once its server stopped answering mid-way.
 */
export function lostRelease(release: IRelease): IRelease {
  return {
    ...release,
    state: LOST,
    detail:
      `the server stopped answering while the release was ${release.state}; ` +
      'it has most likely been stopped'
  };
}

/**
 * Whether a release is under way (pausing sessions or stopping the server).
 */
export function isReleaseActive(release: IRelease | null | undefined): boolean {
  return !!release && RELEASE_ACTIVE_STATES.includes(release.state);
}

/**
 * Whether the server runs under a JupyterHub: the server's word once it has answered (it is
 * the one that asks the Hub to stop it), the page config's before that.
 */
export function isUnderHub(status: IServerStatus | null, page: IPageHub): boolean {
  if (status) {
    return !!status.hub;
  }
  return !!(page.hubUser || page.hubPrefix);
}

function sessions(n: number): string {
  return n === 1 ? '1 session' : `${n} sessions`;
}

/**
 * Why a release ended without stopping the server, in one sentence: the release's detail, or
 * the first failed session's.
 */
export function releaseDetail(release: IRelease): string {
  const detail = (release.detail || '').trim();
  if (detail) {
    return detail;
  }
  const failed = release.sessions.find(s => s.state === SessionState.FAILED);
  return failed ? `${failed.path}: ${failed.detail || 'failed'}` : '';
}

/**
 * The indicator's text during and after a release.
 *
 * - `pausing 3 sessions`, then `pausing 3 sessions (1 paused)`
 * - `stopping the server`
 * - `server stopped · sessions paused`
 * - `server gone during the release` (it stopped answering before saying `stopped`)
 * - `paused, server not stopped: <detail>`
 * - `release failed: <detail>`
 */
export function formatRelease(release: IRelease): string {
  const detail = releaseDetail(release);
  switch (release.state) {
    case ReleaseState.PAUSING: {
      const total = release.sessions.length;
      const done = release.sessions.filter(s => s.state === SessionState.PAUSED).length;
      if (!total) {
        return 'pausing every session'; // the server has not listed them yet
      }
      return `pausing ${sessions(total)}` + (done ? ` (${done} paused)` : '');
    }
    case ReleaseState.STOPPING:
      return 'stopping the server';
    case ReleaseState.STOPPED:
      return 'server stopped · sessions paused';
    case LOST:
      return 'server gone during the release';
    case ReleaseState.PAUSED:
      return detail ? `paused, server not stopped: ${detail}` : 'paused, server not stopped';
    case ReleaseState.FAILED:
      return detail ? `release failed: ${detail}` : 'release failed';
    default:
      return detail ? `release ${release.state}: ${detail}` : `release ${release.state}`;
  }
}

/**
 * The indicator's tooltip during and after a release: one fact a line, each session too.
 */
export function describeRelease(release: IRelease): string {
  const lines = [`release ${release.id} (${release.trigger}): ${release.state}`];
  if (release.detail) {
    lines.push(release.detail);
  }
  for (const s of release.sessions) {
    lines.push(`${s.path}: ${s.state}` + (s.detail ? ` (${s.detail})` : ''));
  }
  return lines.join('\n');
}

/**
 * Whether a notebook's indicator shows the release instead of its own session.
 *
 * While the release runs, and once it stopped the server (or the server went away while it
 * ran), every notebook shows it. A release
 * that ended without stopping the server stays on the notebooks it paused (or failed to) until
 * they are resumed; the others go back to their own state.
 */
export function showsRelease(
  release: IRelease | null | undefined,
  status: IPauseStatus | null
): release is IRelease {
  if (!release) {
    return false;
  }
  if (isReleaseActive(release) || release.state === ReleaseState.STOPPED || release.state === LOST) {
    return true;
  }
  return (
    !!status &&
    status.release === release.id &&
    (status.state === SessionState.PAUSED || status.state === SessionState.FAILED)
  );
}

/**
 * A notification's words and kind for a release's state.
 */
export interface IReleaseNotice {
  /** At most NOTICE_LENGTH characters: a toast shows no more. */
  message: string;
  /** in-progress | success | warning | error, as JupyterLab's Notification takes them */
  type: 'in-progress' | 'success' | 'warning' | 'error';
  /** Whether the release is over (the notification stays until dismissed). */
  final: boolean;
  /** The server's sentence on why the server was not stopped, for a "Details" button. */
  details: string;
}

/**
 * The longest message a JupyterLab toast shows whole.
 */
export const NOTICE_LENGTH = 140;

/**
 * What the notification that follows a release says at each state. `stopped` says plainly that
 * JupyterLab is about to lose its server, and how to come back.
 */
export function releaseNotice(release: IRelease): IReleaseNotice {
  const notice = (
    message: string,
    type: IReleaseNotice['type'],
    final = true,
    details = ''
  ): IReleaseNotice => ({ message, type, final, details });
  switch (release.state) {
    case ReleaseState.PAUSING:
      return notice(
        release.sessions.length
          ? `Pausing ${sessions(release.sessions.length)}, then stopping the server…`
          : 'Pausing every session, then stopping the server…',
        'in-progress',
        false
      );
    case ReleaseState.STOPPING:
      return notice('Every session is paused; asking the Hub to stop this server…', 'in-progress', false);
    case ReleaseState.STOPPED:
      return notice(
        'Sessions paused; the server is stopping and its GPU goes back. ' +
          'JupyterLab loses its connection now: start it again from the Hub.',
        'success'
      );
    case LOST:
      return notice(
        'The server went away mid-release, most likely stopped as asked. ' +
          'JupyterLab loses its connection now: start it again from the Hub.',
        'success'
      );
    case ReleaseState.PAUSED:
      return notice(
        'Every session is paused, but the server was not stopped.',
        'warning',
        true,
        releaseDetail(release)
      );
    default:
      return notice(
        'Pause all failed: the server was not stopped.',
        'error',
        true,
        releaseDetail(release)
      );
  }
}
