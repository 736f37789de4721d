/**
 * What the extension attaches to each notebook: its status model, the pause and resume
 * actions, the guard that keeps a paused notebook from starting a fresh kernel, and picking
 * up the kernel a resume started on the server.
 */
import { Dialog, Notification, showDialog } from '@jupyterlab/apputils';
import { NotebookPanel } from '@jupyterlab/notebook';
import { KernelSpec, Session } from '@jupyterlab/services';
import { IDisposable } from '@lumino/disposable';
import { ISignal, Signal } from '@lumino/signaling';

import { errorMessage, PauseAPI, showError } from './handler';
import { askResumeKernel, IResumeKernelChoice, resumeKernelChoice } from './kernelchoice';
import { PauseStatusModel } from './model';
import { isBusy, SessionState } from './status';

/**
 * How long an automatic kernel start waits for the first status answer (ms).
 */
const FIRST_STATUS_TIMEOUT = 5000;

export class NotebookPauseController implements IDisposable {
  constructor(options: NotebookPauseController.IOptions) {
    this.panel = options.panel;
    this._sessions = options.sessions;
    this._onResumeRequested = options.onResumeRequested;
    this._resumeOnOpen = options.resumeOnOpen ?? (async () => false);
    this._kernelspecs = options.kernelspecs ?? null;
    this._askKernel = options.askKernel ?? askResumeKernel;
    this.model = new PauseStatusModel({
      path: () => this.panel.context.path,
      fetch: PauseAPI.status,
      onError: options.onPollError
    });
    this.model.stateChanged.connect(this._onStateChanged, this);
    this.panel.sessionContext.kernelChanged.connect(this._emitChanged, this);
    this._guardKernelStart();
    this.panel.disposed.connect(() => this.dispose());
  }

  readonly panel: NotebookPanel;
  readonly model: PauseStatusModel;

  /**
   * Emitted when what the commands can do may have changed (state or kernel).
   */
  get changed(): ISignal<this, void> {
    return this._changed;
  }

  get isDisposed(): boolean {
    return this._isDisposed;
  }

  get path(): string {
    return this.panel.context.path;
  }

  /**
   * Whether Pause makes sense now: not already paused, pausing or resuming.
   */
  get canPause(): boolean {
    const state = this.model.status?.state;
    return !this._acting && state !== SessionState.PAUSED && !isBusy(state);
  }

  /**
   * Whether Resume makes sense now: no kernel here, and no pause or resume under way.
   */
  get canResume(): boolean {
    const state = this.model.status?.state;
    return (
      !this._acting &&
      !isBusy(state) &&
      !this.panel.sessionContext.session?.kernel
    );
  }

  /**
   * Save the notebook, then ask the server to checkpoint the kernel and shut it down.
   *
   * A collaborative notebook (jupyter-collaboration) is saved by the server's pause itself, from
   * the shared document as it is at the click. Saving it here as well would race the room's own
   * autosave of the cell's last outputs, and JupyterLab would ask "File Changed" over the Pause.
   */
  async pause(): Promise<void> {
    const path = this.path;
    this._setActing(true);
    try {
      try {
        if (!this.panel.context.model.collaborative) {
          await this.panel.context.save();
        }
      } catch (error) {
        showError(
          `Not paused: saving ${path} failed: ${errorMessage(error)}`
        );
        return;
      }
      try {
        this.model.update(await PauseAPI.pause(path));
      } catch (error) {
        showError(`Could not pause ${path}: ${errorMessage(error)}`);
      }
    } finally {
      this._setActing(false);
      void this.model.refresh();
    }
  }

  /**
   * Ask the server to start a kernel, restore the newest checkpoint and verify it.
   *
   * The kernel is the kernelspec the notebook ran on. When this server lacks it, or when
   * `pickKernel` asks, the Resume dialog lets the user pick one; cancelling it resumes nothing.
   */
  async resume(options: { pickKernel?: boolean } = {}): Promise<void> {
    const path = this.path;
    this._setActing(true);
    try {
      const kernel = await this._resumeKernel(!!options.pickKernel);
      if (kernel === null) {
        return;
      }
      this.model.update(await PauseAPI.resume(path, kernel));
    } catch (error) {
      showError(`Could not resume ${path}: ${errorMessage(error)}`);
    } finally {
      this._setActing(false);
      void this.model.refresh();
    }
  }

  /**
   * The kernelspec to ask the server for: undefined to leave it the one the session recorded,
   * null when the user cancelled the Resume dialog.
   */
  private async _resumeKernel(pickKernel: boolean): Promise<string | null | undefined> {
    const kernelspecs = this._kernelspecs;
    if (!kernelspecs) {
      return undefined;
    }
    if (!kernelspecs.specs) {
      await Promise.race([kernelspecs.ready, Private.sleep(FIRST_STATUS_TIMEOUT)]);
    }
    const choice = resumeKernelChoice(this.recordedKernel, kernelspecs.specs);
    const ask = pickKernel || (choice.recorded !== null && !choice.present);
    // With nothing to pick from, the server's answer names what is missing.
    return ask && choice.options.length ? this._askKernel(this.path, choice) : undefined;
  }

  /**
   * The kernelspec the notebook ran on: as its pause recorded it, else as its metadata names it.
   */
  get recordedKernel(): string | null {
    const metadata = (this.panel.context as any).model?.getMetadata?.('kernelspec');
    return this.model.status?.kernel || metadata?.name || null;
  }

  dispose(): void {
    if (this._isDisposed) {
      return;
    }
    this._isDisposed = true;
    this.model.dispose();
    Signal.clearData(this);
  }

  /**
   * Wrap this notebook's `sessionContext.startKernel`, the one call through which running a
   * cell without a kernel (and opening a notebook) starts a new kernel: while the session is
   * paused or being resumed it starts nothing, and a user's attempt gets the paused dialog.
   */
  private _guardKernelStart(): void {
    const sessionContext = this.panel.sessionContext;
    const startKernel = sessionContext.startKernel.bind(sessionContext);
    sessionContext.startKernel = async (): Promise<boolean> => {
      // Before `isReady` this is the start that opening the notebook does, not a user's.
      const byUser = sessionContext.isReady;
      if (!this._isDisposed && this.model.status === null) {
        await Promise.race([this.model.ready, Private.sleep(FIRST_STATUS_TIMEOUT)]);
      }
      const state = this._isDisposed ? undefined : this.model.status?.state;
      const resumeOnOpen =
        state === SessionState.PAUSED && !byUser
          ? await Promise.race([this._resumeOnOpen(), Private.sleep(FIRST_STATUS_TIMEOUT)])
          : false;
      switch (kernelStartAction(state, byUser, !!resumeOnOpen)) {
        case 'start':
          return startKernel();
        case 'resume':
          // What accepting the paused dialog does, without asking.
          this._onResumeRequested(this);
          return false;
        case 'ask':
          void this._showPausedDialog();
          return false;
        case 'busy':
          Notification.warning(
            `${this.path} is being resumed (${this.model.text}); its kernel is not here yet: ` +
              'run the cell again in a moment, and it runs as soon as the restore is done.',
            { autoClose: 5000 }
          );
          return false;
        default:
          return false;
      }
    };
  }

  private async _showPausedDialog(): Promise<void> {
    if (this._dialogOpen) {
      // "Run all" asks once per cell.
      return;
    }
    this._dialogOpen = true;
    try {
      const checkpoint = this.model.status?.checkpoint;
      const result = await showDialog({
        title: 'This session is paused',
        body:
          `The kernel of ${this.path} was shut down when it was paused` +
          (checkpoint ? `; its state is in checkpoint ${checkpoint}` : '') +
          '. Resume it to get that state back and run cells. ' +
          'A new kernel would start without it.',
        buttons: [
          Dialog.cancelButton({ label: 'Cancel' }),
          Dialog.okButton({ label: 'Resume' })
        ]
      });
      if (result.button.accept) {
        this._onResumeRequested(this);
      }
    } finally {
      this._dialogOpen = false;
    }
  }

  private _onStateChanged(
    _: PauseStatusModel,
    change: PauseStatusModel.IChange
  ): void {
    this._emitChanged();
    const { previous, current } = change;
    if (current?.state === SessionState.RESTORING) {
      // The resume's kernel is the notebook's from its start: connect to it while it restores,
      // so that a cell run now waits in it and runs as soon as the restore is done.
      void this._adoptServerKernel();
    }
    if (!previous || !current || previous.state === current.state) {
      return;
    }
    const path = current.path || this.path;
    if (current.state === SessionState.PAUSED) {
      // The server shut the kernel down: let the notebook see that now, not at the next
      // poll of running sessions.
      void this._sessions.refreshRunning().catch(() => undefined);
      // A release's own notification speaks for the sessions it pauses.
      if (isBusy(previous.state) && !current.release) {
        Notification.info(
          `Paused ${path}: kernel shut down` +
            (current.checkpoint ? `, state in checkpoint ${current.checkpoint}` : ''),
          { autoClose: 5000 }
        );
      }
    }
    if (current.state === SessionState.FAILED && isBusy(previous.state) && !current.release) {
      showError(`${path}: ${current.detail || 'failed'}`);
    }
    if (current.state === SessionState.READY && current.verdict && isBusy(previous.state)) {
      const text = `Resumed ${path}: ${this.model.text.replace(/^ready · /, '')}`;
      if (current.verdict === 'restored') {
        Notification.success(text, { autoClose: 5000 });
      } else {
        Notification.warning(`${text}. ${current.detail}`, { autoClose: false });
      }
    }
    if (
      (current.state === SessionState.READY || current.state === SessionState.FAILED) &&
      (previous.state === SessionState.PAUSED ||
        previous.state === SessionState.WAITING ||
        previous.state === SessionState.RESTORING)
    ) {
      void this._adoptServerKernel();
    }
  }

  /**
   * A resume starts the kernel on the server; connect this notebook to it (once: a call while
   * one is under way waits for that one).
   */
  private _adoptServerKernel(): Promise<void> {
    if (!this._adopting) {
      this._adopting = this._adoptOnce().finally(() => {
        this._adopting = null;
      });
    }
    return this._adopting;
  }

  private async _adoptOnce(): Promise<void> {
    const sessionContext = this.panel.sessionContext;
    if (this._isDisposed || sessionContext.isDisposed || sessionContext.session?.kernel) {
      return;
    }
    try {
      await this._sessions.refreshRunning();
      const path = this.path;
      const model = Array.from(this._sessions.running()).find(
        session => session.path === path && !!session.kernel
      );
      if (!model?.kernel || sessionContext.session?.kernel) {
        return;
      }
      // What SessionContext.initialize() does for a session that already exists. It is not
      // public API; without it, changeKernel({id}) connects too, through a second server
      // session on the same kernel (shown as two kernels in the status bar).
      const adopt = (sessionContext as any)._handleNewSession;
      if (typeof adopt === 'function') {
        adopt.call(sessionContext, this._sessions.connectTo({ model }));
      } else {
        await sessionContext.changeKernel({ id: model.kernel.id });
      }
    } catch (error) {
      showError(
        `${this.path}: connecting to the kernel of its resume failed: ${errorMessage(error)}; ` +
          'reopen the notebook to connect to it'
      );
    }
  }

  private _setActing(acting: boolean): void {
    this._acting = acting;
    this._emitChanged();
  }

  private _emitChanged(): void {
    if (!this._isDisposed) {
      this._changed.emit();
    }
  }

  private _acting = false;
  private _adopting: Promise<void> | null = null;
  private _askKernel: (path: string, choice: IResumeKernelChoice) => Promise<string | null>;
  private _changed = new Signal<this, void>(this);
  private _dialogOpen = false;
  private _isDisposed = false;
  private _kernelspecs: KernelSpec.IManager | null;
  private _onResumeRequested: (controller: NotebookPauseController) => void;
  private _resumeOnOpen: () => Promise<boolean>;
  private _sessions: Session.IManager;
}

export namespace NotebookPauseController {
  export interface IOptions {
    panel: NotebookPanel;
    sessions: Session.IManager;
    /**
     * Resume asked for from the paused dialog, or by opening a paused notebook on a server
     * that resumes on open (runs the Resume command).
     */
    onResumeRequested: (controller: NotebookPauseController) => void;
    onPollError?: (message: string) => void;
    /**
     * Whether the server resumes a paused session when its notebook is opened
     * (c.PauseServer.resume_on_open); default never.
     */
    resumeOnOpen?: () => Promise<boolean>;
    /**
     * The server's kernelspecs: Resume asks which one to start when the notebook's is missing.
     */
    kernelspecs?: KernelSpec.IManager;
    /**
     * Ask which kernelspec to resume in (default: the Resume dialog); null: cancelled.
     */
    askKernel?: (path: string, choice: IResumeKernelChoice) => Promise<string | null>;
  }
}

/**
 * What the guard does with a kernel start, given the session's state:
 *
 * - `start`: not paused, start the kernel as JupyterLab asked
 * - `resume`: opening a paused notebook on a server that resumes on open
 * - `ask`: the user ran a cell in a paused notebook; offer Resume (the paused dialog)
 * - `busy`: the user ran a cell while a resume is under way; say so
 * - `none`: start nothing and say nothing (opening a paused or resuming notebook)
 */
export function kernelStartAction(
  state: string | undefined,
  byUser: boolean,
  resumeOnOpen: boolean
): 'start' | 'resume' | 'ask' | 'busy' | 'none' {
  if (state === SessionState.PAUSED) {
    if (byUser) {
      return 'ask';
    }
    return resumeOnOpen ? 'resume' : 'none';
  }
  if (state === SessionState.WAITING || state === SessionState.RESTORING) {
    return byUser ? 'busy' : 'none';
  }
  return 'start';
}

namespace Private {
  export function sleep(ms: number): Promise<void> {
    return new Promise(resolve => setTimeout(resolve, ms));
  }
}
