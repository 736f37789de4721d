/**
 * The server's own pause status (Hub, resume_on_open, its sessions, its newest release), kept
 * fresh by a lumino Poll: slowly while nothing happens, every second while a release runs.
 *
 * Only @lumino imports here: the release command, the status indicators and the notebook
 * controllers read it, and the unit tests drive it with a fake fetch.
 */
import { Token } from '@lumino/coreutils';
import { ISignal, Signal } from '@lumino/signaling';

import { PolledStatus } from './polled';

import {
  IPageHub,
  IRelease,
  IReleaseWarning,
  IServerStatus,
  isReleaseActive,
  isUnderHub,
  lostRelease,
  ReleaseState
} from './release';
import { FAST_INTERVAL } from './status';

/**
 * How often the server's status is asked for while no release runs (ms).
 */
export const SERVER_INTERVAL = 10000;

/**
 * The one ServerStatusModel of the page, shared by the plugins.
 */
export const IServerStatusModel = new Token<ServerStatusModel>(
  'jupyter-pause:server-status',
  "The server's pause status: Hub, resume_on_open, sessions, release progress."
);

export class ServerStatusModel extends PolledStatus<IServerStatus> {
  constructor(options: ServerStatusModel.IOptions) {
    super({
      name: 'jupyter-pause:server-status',
      interval: SERVER_INTERVAL,
      auto: options.auto,
      standby: options.standby
    });
    this._fetch = options.fetch;
    this._page = options.page ?? {};
  }

  /**
   * Emitted when the status changes (a new answer, or a release's progress).
   */
  get changed(): ISignal<this, void> {
    return this._changed;
  }

  /**
   * The last answer, or null before the first one (or while the server cannot answer).
   */
  get status(): IServerStatus | null {
    return this._status;
  }

  /**
   * The server's newest release, or null.
   */
  get release(): IRelease | null {
    const release = this._status?.release ?? null;
    return release && this._lost ? lostRelease(release) : release;
  }

  /**
   * Whether "Pause all and stop server" applies: the server runs under a JupyterHub.
   */
  get underHub(): boolean {
    return isUnderHub(this._status, this._page);
  }

  /**
   * The pause service's pending warning of a release, or null.
   */
  get warning(): IReleaseWarning | null {
    return this._status?.warning ?? null;
  }

  /**
   * Whether opening a paused session's notebook resumes it (c.PauseServer.resume_on_open).
   */
  get resumeOnOpen(): boolean {
    return !!this._status?.resume_on_open;
  }

  /**
   * Whether a release is pausing sessions or stopping the server now.
   */
  get releasing(): boolean {
    return isReleaseActive(this.release);
  }

  /**
   * Whether the Hub accepted to stop this server, or the server stopped answering while it
   * released: it is going away, and requests to it fail from now on (no one needs to hear
   * about each).
   */
  get stopping(): boolean {
    return this._lost || this.release?.state === ReleaseState.STOPPED;
  }

  /**
   * Take a release the server returned some other way (the reply of POST /release).
   */
  updateRelease(release: IRelease): void {
    if (this._status) {
      this.answered({ ...this._status, release });
    }
  }

  protected canRefresh(): boolean {
    return this._status?.release?.state !== ReleaseState.STOPPED; // the server is gone
  }

  protected ask(): Promise<IServerStatus> {
    return this._fetch();
  }

  protected fail(): void {
    if (!this._lost && isReleaseActive(this._status?.release)) {
      // Gone mid-release: most likely stopped by the Hub before a poll saw "stopped". The
      // poll goes on (backing off) in case it was only a blip.
      this._lost = true;
      this._changed.emit();
    }
  }

  protected apply(status: IServerStatus): void {
    const same = JSON.stringify(status) === JSON.stringify(this._status);
    this._lost = false; // it answered
    this._status = status;
    this.setInterval(isReleaseActive(status.release) ? FAST_INTERVAL : SERVER_INTERVAL);
    if (this.stopping) {
      // The server is going away: asking it again only fails.
      this.stopPolling();
    }
    if (!same) {
      this._changed.emit();
    }
  }

  private _changed = new Signal<this, void>(this);
  private _fetch: () => Promise<IServerStatus>;
  private _lost = false;
  private _page: IPageHub;
  private _status: IServerStatus | null = null;
}

export namespace ServerStatusModel {
  export interface IOptions extends Pick<PolledStatus.IOptions, 'auto' | 'standby'> {
    /**
     * Ask the server for its status (GET /jupyter-pause/api/status without a path).
     */
    fetch: () => Promise<IServerStatus>;
    /**
     * What the page config says about a Hub, used until the server answers.
     */
    page?: IPageHub;
  }
}
