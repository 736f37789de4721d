/**
 * A status kept fresh by a lumino Poll: what a notebook's status and the server's status share.
 *
 * Only @lumino imports here. Subclasses say how to ask (`ask`), what an answer changes (`apply`)
 * and what a failed ask changes (`fail`); this class keeps answers in order: an answer to a
 * question asked before a `refresh` or `answered` is dropped.
 */
import { PromiseDelegate } from '@lumino/coreutils';
import { IDisposable } from '@lumino/disposable';
import { Poll } from '@lumino/polling';
import { Signal } from '@lumino/signaling';

import { MAX_INTERVAL } from './status';

export abstract class PolledStatus<T> implements IDisposable {
  constructor(options: PolledStatus.IOptions) {
    this._poll = new Poll<T | null, Error, 'standby'>({
      auto: options.auto ?? true,
      factory: () => this._tick(),
      frequency: { interval: options.interval, backoff: true, max: MAX_INTERVAL },
      name: options.name,
      standby: options.standby ?? 'when-hidden'
    });
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
   * The poll interval now in force (ms).
   */
  get interval(): number {
    return this._poll.frequency.interval;
  }

  /**
   * Ask the server now; resolves once the answer is applied.
   */
  async refresh(): Promise<void> {
    if (this._isDisposed || !this.canRefresh()) {
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

  dispose(): void {
    if (this._isDisposed) {
      return;
    }
    this._isDisposed = true;
    this._poll.dispose();
    this._ready.resolve();
    Signal.clearData(this);
  }

  /**
   * Ask the server for the status.
   */
  protected abstract ask(): Promise<T>;

  /**
   * Take an answer (the newest: older ones never get here).
   */
  protected abstract apply(status: T): void;

  /**
   * Take a failed ask (the newest). The poll then backs off.
   */
  protected abstract fail(reason: unknown): void;

  /**
   * Whether asking again can give anything (default: always).
   */
  protected canRefresh(): boolean {
    return true;
  }

  /**
   * Take a status the server returned some other way (the reply of a POST): it replaces
   * whatever answer is on its way.
   */
  protected answered(status: T): void {
    if (this._isDisposed) {
      return;
    }
    this._generation++;
    this.apply(status);
  }

  protected setInterval(interval: number): void {
    const frequency = this._poll.frequency;
    if (frequency.interval !== interval) {
      this._poll.frequency = { ...frequency, interval };
    }
  }

  protected stopPolling(): void {
    void this._poll.stop();
  }

  private async _tick(): Promise<T | null> {
    const generation = this._generation;
    try {
      const status = await this.ask();
      if (generation === this._generation && !this._isDisposed) {
        this.apply(status);
      }
      return status;
    } catch (reason) {
      if (generation === this._generation && !this._isDisposed) {
        this.fail(reason);
      }
      // Rejecting lets the poll back off.
      throw reason;
    } finally {
      this._ready.resolve();
    }
  }

  private _generation = 0;
  private _isDisposed = false;
  private _poll: Poll<T | null, Error, 'standby'>;
  private _ready = new PromiseDelegate<void>();
}

export namespace PolledStatus {
  export interface IOptions {
    /**
     * The poll's name (for debugging).
     */
    name: string;
    /**
     * The first poll interval (ms).
     */
    interval: number;
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
