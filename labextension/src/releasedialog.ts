/**
 * "Pause all and stop server": the command, its confirmation dialog, and the one notification
 * that follows a release to its end.
 */
import { Dialog, Notification, showDialog } from '@jupyterlab/apputils';
import { CommandRegistry } from '@lumino/commands';
import { DisposableDelegate, IDisposable } from '@lumino/disposable';
import { Widget } from '@lumino/widgets';

import { errorMessage, errorStatus, PauseAPI, showError } from './handler';
import {
  INotebookSession,
  IRelease,
  IReleaseNotice,
  IServerStatus,
  isReleaseActive,
  LOST,
  ReleaseState,
  releaseNotice
} from './release';
import { ServerStatusModel } from './servermodel';
import { IButtonText } from './toolbar';

/**
 * The command's words (File menu, palette).
 */
export const RELEASE_TEXT: IButtonText = {
  label: 'Pause All and Stop Server',
  caption:
    'Pause every notebook session (checkpoint, shut the kernel down), then stop this ' +
    'server so its GPU goes back'
};

/**
 * The confirmation dialog's body: the sessions that will be paused, and what happens next.
 *
 * DOM:
 *
 * ```
 * <div class="jp-PauseRelease">
 *   <p>These notebook sessions will be paused: ...</p>
 *   <ul class="jp-PauseRelease-sessions">
 *     <li data-path="dir/nb.ipynb">dir/nb.ipynb <span class="jp-PauseRelease-kernel">busy</span></li>
 *   </ul>
 *   <p>Then this server stops ...</p>
 * </div>
 * ```
 */
export function releaseDialogBody(status: IServerStatus): Widget {
  const body = new Widget();
  body.addClass('jp-PauseRelease');
  const intro = document.createElement('p');
  const list = document.createElement('ul');
  list.className = 'jp-PauseRelease-sessions';
  const sessions: INotebookSession[] = status.sessions ?? [];
  if (sessions.length) {
    intro.textContent =
      sessions.length === 1
        ? 'This notebook session will be paused: its kernel state is checkpointed, then the kernel shuts down.'
        : `These ${sessions.length} notebook sessions will be paused: each kernel's state is checkpointed, then the kernel shuts down.`;
    for (const session of sessions) {
      const item = document.createElement('li');
      item.dataset.path = session.path;
      item.textContent = session.path;
      if (session.kernel_state) {
        const kernel = document.createElement('span');
        kernel.className = 'jp-PauseRelease-kernel';
        kernel.textContent = ` ${session.kernel_state}`;
        kernel.title = `kernel ${session.kernel_state}`;
        item.append(kernel);
      }
      list.append(item);
    }
  } else {
    intro.textContent = 'No notebook has a running kernel: there is nothing to pause.';
    list.hidden = true;
  }
  const after = document.createElement('p');
  after.textContent =
    'Then this server stops and its GPU goes back. JupyterLab will lose its connection. ' +
    'To come back, start your server again from the Hub, on any node, and ' +
    (status.resume_on_open
      ? 'open a notebook: it resumes by itself.'
      : 'resume the sessions from the Paused sessions panel.');
  body.node.append(intro, list, after);
  return body;
}

/**
 * Ask the user; true when they accept.
 */
export async function confirmRelease(status: IServerStatus): Promise<boolean> {
  const result = await showDialog({
    title: 'Pause all sessions and stop the server?',
    body: releaseDialogBody(status),
    buttons: [
      Dialog.cancelButton({ label: 'Cancel' }),
      Dialog.warnButton({ label: 'Pause all and stop' })
    ]
  });
  return result.button.accept;
}

/**
 * Register the command `id`: shown only under a JupyterHub, enabled while no release runs.
 */
export function addReleaseCommand(
  commands: CommandRegistry,
  id: string,
  options: ReleaseCommand.IOptions
): IDisposable {
  const { server } = options;
  const command = commands.addCommand(id, {
    label: RELEASE_TEXT.label,
    caption: RELEASE_TEXT.caption,
    isVisible: () => server.underHub,
    isEnabled: () => server.underHub && !server.releasing && !server.stopping,
    execute: () => runRelease(options)
  });
  const changed = () => commands.notifyCommandChanged(id);
  server.changed.connect(changed);
  return new DisposableDelegate(() => {
    command.dispose();
    server.changed.disconnect(changed);
  });
}

/**
 * Confirm, save the open notebooks, and ask the server to release; the server model then
 * follows the release. Resolves with the release started (or joined), null when none was.
 */
export async function runRelease(options: ReleaseCommand.IOptions): Promise<IRelease | null> {
  const { server } = options;
  await server.refresh();
  const status = server.status;
  if (!status) {
    showError(
      "Nothing was paused: this server's pause status could not be read " +
        '(GET jupyter-pause/api/status). Try again in a moment.'
    );
    return null;
  }
  if (isReleaseActive(status.release)) {
    Notification.info('Pause all and stop server is already under way.', { autoClose: 5000 });
    return status.release;
  }
  if (!(await (options.confirm ?? confirmRelease)(status))) {
    return null;
  }
  try {
    await options.saveAll();
  } catch (error) {
    showError(`Nothing was paused: saving the open notebooks failed: ${errorMessage(error)}`);
    return null;
  }
  try {
    const release = await PauseAPI.release();
    server.updateRelease(release);
    return release;
  } catch (error) {
    if (errorStatus(error) === 409) {
      // Someone else (another tab, the idle culler) started one first: follow theirs.
      await server.refresh();
      return server.release;
    }
    showError(`Could not pause all and stop the server: ${errorMessage(error)}`);
    return null;
  } finally {
    void server.refresh();
  }
}

/**
 * One notification per release, updated in place as it goes, from whichever trigger started
 * it (this button, another tab, a service, the idle culler). A release already over when
 * first seen is not announced; the indicators show it.
 */
export class ReleaseNotifier implements IDisposable {
  constructor(server: ServerStatusModel, hubHome: string | null) {
    this._server = server;
    this._hubHome = hubHome;
    server.changed.connect(this._onChanged, this);
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
  }

  private _onChanged(): void {
    const release = this._server.release;
    if (!release) {
      return;
    }
    if (release.id !== this._releaseId) {
      if (!isReleaseActive(release)) {
        return;
      }
      this._releaseId = release.id;
      this._notification = null;
      this._state = '';
    }
    if (release.state === this._state) {
      return;
    }
    this._state = release.state;
    const notice = releaseNotice(release);
    const options = { autoClose: false as const, actions: this._actions(release, notice) };
    if (
      this._notification === null ||
      !Notification.update({
        id: this._notification,
        message: notice.message,
        type: notice.type,
        ...options
      })
    ) {
      // The first, or the user dismissed the last one: the end is worth a new one.
      if (this._notification === null || notice.final) {
        this._notification = Notification.emit(notice.message, notice.type, options);
      }
    }
  }

  private _actions(release: IRelease, notice: IReleaseNotice): Notification.IAction[] {
    const actions: Notification.IAction[] = [];
    if (notice.details) {
      actions.push({
        label: 'Details',
        caption: 'Why the server was not stopped',
        callback: () =>
          void showDialog({
            title: 'Pause all and stop server',
            body: notice.details,
            buttons: [Dialog.okButton({ label: 'Close' })]
          })
      });
    }
    const hubHome = this._hubHome;
    if ((release.state === ReleaseState.STOPPED || release.state === LOST) && hubHome) {
      actions.push({
        label: 'Hub Control Panel',
        caption: 'Open the Hub, to start your server again',
        callback: () => void window.open(hubHome, '_blank')
      });
    }
    return actions;
  }

  private _hubHome: string | null;
  private _isDisposed = false;
  private _notification: string | null = null;
  private _releaseId = '';
  private _server: ServerStatusModel;
  private _state = '';
}

export namespace ReleaseCommand {
  export interface IOptions {
    server: ServerStatusModel;
    /**
     * Save the open notebooks (what is not saved is lost when the server stops).
     */
    saveAll: () => Promise<void>;
    /**
     * Ask the user (default: the confirmation dialog).
     */
    confirm?: (status: IServerStatus) => Promise<boolean>;
  }
}
