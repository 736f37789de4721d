/**
 * The state of one notebook's session, kept fresh by a lumino Poll.
 *
 * Only @lumino imports here: the view renders it, the notebook controller acts on it, and the
 * unit tests drive it with a fake fetch.
 */
import { PromiseDelegate } from '@lumino/coreutils';
import { IDisposable } from '@lumino/disposable';
import { Poll } from '@lumino/polling';
import { ISignal, Signal } from '@lumino/signaling';

import {
  describeStatus,
  formatError,
  formatStatus,
  IPauseStatus,
  MAX_INTERVAL,
  pollInterval
} from './status';

/**
 * A notebook session's pause state, polled from the server.
 */
export class PauseStatusModel implements IDisposable {
  constructor(options: PauseStatusModel.IOptions) {
    this._path = options.path;
    this._fetch = options.fetch;
    this._onError = options.onError;
    this._poll = new Poll<IPauseStatus | null, Error, 'standby'>({
      auto: options.auto ?? true,
      factory: () => this._tick(),
      frequency: {
        interval: pollInterval(null),
        backoff: true,
        max: MAX_INTERVAL
      },
      name: 'jupyter-pause:status',
      standby: options.standby ?? 'when-hidden'
    });
  }

  /**
   * Emitted when the status or the error changes.
   */
  get stateChanged(): ISignal<this, PauseStatusModel.IChange> {
    return this._stateChanged;
  }

  /**
   * The last status the server gave, or null before the first answer.
   */
  get status(): IPauseStatus | null {
    return this._status;
  }

  /**
   * The server's state (`ready`, `paused`, ...), or `unknown` before the first answer.
   */
  get state(): string {
    return this._status?.state ?? 'unknown';
  }

  /**
   * The message of the last failed poll, or null when the last poll succeeded.
   */
  get error(): string | null {
    return this._error;
  }

  /**
   * What the indicator shows as `data-state`: the state, or `error` while the status
   * cannot be read.
   */
  get displayState(): string {
    return this._error !== null ? 'error' : this.state;
  }

  /**
   * What the indicator shows.
   */
  get text(): string {
    if (this._error !== null) {
      return formatError(this._error);
    }
    return this._status ? formatStatus(this._status) : '…';
  }

  /**
   * The indicator's tooltip.
   */
  get tooltip(): string {
    if (this._error !== null) {
      return formatError(this._error);
    }
    return this._status ? describeStatus(this._status) : 'asking the server…';
  }

  /**
   * The poll interval now in force (ms).
   */
  get interval(): number {
    return this._poll.frequency.interval;
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
    if (this._isDisposed) {
      return;
    }
    // An answer already on its way was asked before whatever made us refresh: drop it.
    this._generation++;
    await this._poll.refresh();
    try {
      await this._poll.tick;
    } catch (error) {
      // The tick of a poll disposed meanwhile (the notebook closed) rejects; nothing waits for it.
      if (!this._isDisposed) {
        throw error;
      }
    }
  }

  /**
   * Apply a status the server returned some other way (the reply of POST /pause or /resume).
   */
  update(status: IPauseStatus): void {
    if (this._isDisposed) {
      return;
    }
    this._generation++;
    this._apply(status);
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

  private async _tick(): Promise<IPauseStatus | null> {
    const generation = this._generation;
    try {
      const status = await this._fetch(this._path());
      if (generation === this._generation && !this._isDisposed) {
        this._apply(status);
      }
      return status;
    } catch (reason) {
      if (generation === this._generation && !this._isDisposed) {
        this._fail(reason);
      }
      // Rejecting lets the poll back off.
      throw reason;
    } finally {
      this._ready.resolve();
    }
  }

  private _apply(status: IPauseStatus): void {
    const previous = this._status;
    const hadError = this._error !== null;
    this._status = status;
    this._error = null;
    this._setInterval(pollInterval(status.state));
    if (hadError || !previous || Private.differs(previous, status)) {
      this._stateChanged.emit({ previous, current: status });
    }
  }

  private _fail(reason: unknown): void {
    const message =
      reason instanceof Error ? reason.message : String(reason ?? 'unknown error');
    if (message === this._error) {
      return;
    }
    this._error = message;
    this._stateChanged.emit({ previous: this._status, current: this._status });
    this._onError?.(message);
  }

  private _setInterval(interval: number): void {
    const frequency = this._poll.frequency;
    if (frequency.interval !== interval) {
      this._poll.frequency = { ...frequency, interval };
    }
  }

  private _error: string | null = null;
  private _fetch: (path: string) => Promise<IPauseStatus>;
  private _generation = 0;
  private _isDisposed = false;
  private _onError?: (message: string) => void;
  private _path: () => string;
  private _poll: Poll<IPauseStatus | null, Error, 'standby'>;
  private _ready = new PromiseDelegate<void>();
  private _stateChanged = new Signal<this, PauseStatusModel.IChange>(this);
  private _status: IPauseStatus | null = null;
}

export namespace PauseStatusModel {
  export interface IOptions {
    /**
     * The notebook's path now (it changes when the notebook is renamed).
     */
    path: () => string;
    /**
     * Ask the server for the status of a path.
     */
    fetch: (path: string) => Promise<IPauseStatus>;
    /**
     * Called when polling starts failing, once per distinct message.
     */
    onError?: (message: string) => void;
    /**
     * Start polling at once (default true).
     */
    auto?: boolean;
    /**
     * When to stop polling (default: while the browser tab is hidden).
     */
    standby?: Poll.Standby | (() => boolean | Poll.Standby);
  }

  export interface IChange {
    previous: IPauseStatus | null;
    current: IPauseStatus | null;
  }
}

namespace Private {
  export function differs(a: IPauseStatus, b: IPauseStatus): boolean {
    return (
      a.state !== b.state ||
      a.detail !== b.detail ||
      a.checkpoint !== b.checkpoint ||
      a.verdict !== b.verdict ||
      a.path !== b.path ||
      a.node !== b.node
    );
  }
}
