/**
 * The notification of the Hub pause service's warning: "This server will be paused in 4:59
 * (idle for 2.0 h)", counting down every second, with Keep working and Pause now.
 *
 * It follows the server's status: shown when a warning appears, gone when the warning ends
 * (kept working, in this tab or another; the server was used; the release came).
 */
import { Notification } from '@jupyterlab/apputils';
import { IDisposable } from '@lumino/disposable';

import { errorMessage, PauseAPI, showError } from './handler';
import { IReleaseWarning, warningMessage } from './release';
import { ServerStatusModel } from './servermodel';

export namespace ReleaseWarningNotifier {
  export interface IOptions {
    server: ServerStatusModel;
    /**
     * Pause every session and stop the server now (saving the open notebooks first).
     */
    pauseNow: () => Promise<void>;
    /**
     * Milliseconds between updates of the countdown.
     */
    tick?: number;
  }
}

export class ReleaseWarningNotifier implements IDisposable {
  constructor(options: ReleaseWarningNotifier.IOptions) {
    this._server = options.server;
    this._pauseNow = options.pauseNow;
    this._tick = options.tick ?? 1000;
    this._server.changed.connect(this._onChanged, this);
    this._onChanged();
  }

  get isDisposed(): boolean {
    return this._isDisposed;
  }

  dispose(): void {
    if (this._isDisposed) {
      return;
    }
    this._isDisposed = true;
    this._server.changed.disconnect(this._onChanged, this);
    this._end();
  }

  private _onChanged(): void {
    const warning = this._server.warning;
    if (!warning || this._server.releasing || this._server.stopping) {
      this._end();
      return;
    }
    // Count down from what the server said, on this browser's clock.
    this._deadline = Date.now() + warning.seconds_left * 1000;
    if (this._warnedAt === warning.warned_at && this._id !== null) {
      this._warning = warning;
      return;
    }
    this._end();
    this._warning = warning;
    this._warnedAt = warning.warned_at;
    this._id = Notification.emit(this._message(), 'warning', {
      autoClose: false,
      actions: this._actions()
    });
    this._timer = window.setInterval(() => this._update(), this._tick);
  }

  private _message(): string {
    const left = Math.max(0, (this._deadline - Date.now()) / 1000);
    return warningMessage(this._warning as IReleaseWarning, left);
  }

  private _update(): void {
    if (this._id === null || this._warning === null) {
      return;
    }
    Notification.update({
      id: this._id,
      message: this._message(),
      type: 'warning',
      autoClose: false,
      actions: this._actions()
    });
  }

  private _actions(): Notification.IAction[] {
    return [
      {
        label: 'Keep working',
        caption: 'Keep this server: the warning ends, and the idle time starts again',
        displayType: 'accent',
        callback: () => void this._keepWorking()
      },
      {
        label: 'Pause now',
        caption: 'Pause every notebook session now and stop the server, so its GPU goes back',
        callback: () => void this._pauseNow()
      }
    ];
  }

  private async _keepWorking(): Promise<void> {
    this._end();
    try {
      await PauseAPI.keepWorking();
    } catch (error) {
      showError(`The server may still be paused: Keep working failed: ${errorMessage(error)}`);
    }
    await this._server.refresh();
  }

  private _end(): void {
    if (this._timer !== null) {
      window.clearInterval(this._timer);
      this._timer = null;
    }
    if (this._id !== null) {
      Notification.dismiss(this._id);
      this._id = null;
    }
    this._warning = null;
    this._warnedAt = null;
  }

  private _deadline = 0;
  private _id: string | null = null;
  private _isDisposed = false;
  private _pauseNow: () => Promise<void>;
  private _server: ServerStatusModel;
  private _tick: number;
  private _timer: number | null = null;
  private _warnedAt: number | null = null;
  private _warning: IReleaseWarning | null = null;
}
