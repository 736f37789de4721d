/**
 * The state of one notebook's session, kept fresh by a lumino Poll.
 *
 * Only @lumino imports here: the view renders it, the notebook controller acts on it, and the
 * unit tests drive it with a fake fetch.
 */
import { ISignal, Signal } from '@lumino/signaling';

import { PolledStatus } from './polled';
import {
  describeStatus,
  formatError,
  formatStatus,
  IPauseStatus,
  pollInterval
} from './status';

/**
 * A notebook session's pause state, polled from the server.
 */
export class PauseStatusModel extends PolledStatus<IPauseStatus> {
  constructor(options: PauseStatusModel.IOptions) {
    super({
      name: 'jupyter-pause:status',
      interval: pollInterval(null),
      auto: options.auto,
      standby: options.standby
    });
    this._path = options.path;
    this._fetch = options.fetch;
    this._onError = options.onError;
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
   * Apply a status the server returned some other way (the reply of POST /pause or /resume).
   */
  update(status: IPauseStatus): void {
    this.answered(status);
  }

  protected ask(): Promise<IPauseStatus> {
    return this._fetch(this._path());
  }

  protected apply(status: IPauseStatus): void {
    const previous = this._status;
    const hadError = this._error !== null;
    this._status = status;
    this._error = null;
    this.setInterval(pollInterval(status.state));
    if (hadError || !previous || Private.differs(previous, status)) {
      this._stateChanged.emit({ previous, current: status });
    }
  }

  protected fail(reason: unknown): void {
    const message =
      reason instanceof Error ? reason.message : String(reason ?? 'unknown error');
    if (message === this._error) {
      return;
    }
    this._error = message;
    this._stateChanged.emit({ previous: this._status, current: this._status });
    this._onError?.(message);
  }

  private _error: string | null = null;
  private _fetch: (path: string) => Promise<IPauseStatus>;
  private _onError?: (message: string) => void;
  private _path: () => string;
  private _stateChanged = new Signal<this, PauseStatusModel.IChange>(this);
  private _status: IPauseStatus | null = null;
}

export namespace PauseStatusModel {
  export interface IOptions extends Pick<PolledStatus.IOptions, 'auto' | 'standby'> {
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
