/**
 * The server's own pause status (Hub, resume_on_open, its sessions, its newest release), kept
 * fresh by a lumino Poll: slowly while nothing happens, every second while a release runs.
 *
 * Only @lumino imports here: the release command, the status indicators and the notebook
 * controllers read it, and the unit tests drive it with a fake fetch.
 */
import { PromiseDelegate, Token } from '@lumino/coreutils';
import { IDisposable } from '@lumino/disposable';
import { Poll } from '@lumino/polling';
import { ISignal, Signal } from '@lumino/signaling';

import {
  IPageHub,
  IRelease,
  IServerStatus,
  isReleaseActive,
  isUnderHub,
  lostRelease
} from './release';
import { FAST_INTERVAL, MAX_INTERVAL } from './status';

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

export class ServerStatusModel implements IDisposable {
  constructor(options: ServerStatusModel.IOptions) {
    this._fetch = options.fetch;
    this._page = options.page ?? {};
    this._poll = new Poll<IServerStatus | null, Error, 'standby'>({
      auto: options.auto ?? true,
      factory: () => this._tick(),
      frequency: { interval: SERVER_INTERVAL, backoff: true, max: MAX_INTERVAL },
      name: 'jupyter-pause:server-status',
      standby: options.standby ?? 'when-hidden'
    });
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
    return this._lost || this.release?.state === 'stopped';
  }

  /**
   * Settles once the first answer (or failure) has come back.
   */
  get ready(): Promise<void> {
    return this._ready.promise;
  }

  get isDisposed(): boolean {
    return this._isDisposed;
  }

  /**
   * Ask the server now; resolves once the answer is applied.
   */
  async refresh(): Promise<void> {
    if (this._isDisposed || this._status?.release?.state === 'stopped') {
      return;
    }
    this._generation++;
    await this._poll.refresh();
    try {
      await this._poll.tick;
    } catch (error) {
      // The tick of a poll disposed meanwhile rejects; nothing is waiting for its answer.
      if (!this._isDisposed) {
        throw error;
      }
    }
  }

  /**
   * Take a release the server returned some other way (the reply of POST /release).
   */
  updateRelease(release: IRelease): void {
    if (this._isDisposed || !this._status) {
      return;
    }
    this._generation++;
    this._apply({ ...this._status, release });
  }

  dispose(): void {
    if (this._isDisposed) {
      return;
    }
    this._isDisposed = true;
    this._poll.dispose();
    this._ready.resolve();
    Signal.clearData(this);
  }

  private async _tick(): Promise<IServerStatus | null> {
    const generation = this._generation;
    try {
      const status = await this._fetch();
      if (generation === this._generation && !this._isDisposed) {
        this._lost = false;
        this._apply(status);
      }
      return status;
    } catch (reason) {
      if (
        generation === this._generation &&
        !this._isDisposed &&
        !this._lost &&
        isReleaseActive(this._status?.release)
      ) {
        // Gone mid-release: most likely stopped by the Hub before a poll saw "stopped". The
        // poll goes on (backing off) in case it was only a blip.
        this._lost = true;
        this._changed.emit();
      }
      throw reason;
    } finally {
      this._ready.resolve();
    }
  }

  private _apply(status: IServerStatus): void {
    const same = JSON.stringify(status) === JSON.stringify(this._status);
    this._status = status;
    const interval = isReleaseActive(status.release) ? FAST_INTERVAL : SERVER_INTERVAL;
    const frequency = this._poll.frequency;
    if (frequency.interval !== interval) {
      this._poll.frequency = { ...frequency, interval };
    }
    if (this.stopping) {
      // The server is going away: asking it again only fails.
      void this._poll.stop();
    }
    if (!same) {
      this._changed.emit();
    }
  }

  private _changed = new Signal<this, void>(this);
  private _fetch: () => Promise<IServerStatus>;
  private _generation = 0;
  private _isDisposed = false;
  private _lost = false;
  private _page: IPageHub;
  private _poll: Poll<IServerStatus | null, Error, 'standby'>;
  private _ready = new PromiseDelegate<void>();
  private _status: IServerStatus | null = null;
}

export namespace ServerStatusModel {
  export interface IOptions {
    /**
     * Ask the server for its status (GET /jupyter-pause/api/status without a path).
     */
    fetch: () => Promise<IServerStatus>;
    /**
     * What the page config says about a Hub, used until the server answers.
     */
    page?: IPageHub;
    /**
     * Start polling at once (default true).
     */
    auto?: boolean;
    /**
     * When to stop polling (default: while the browser tab is hidden).
     */
    standby?: Poll.Standby | (() => boolean | Poll.Standby);
  }
}
