/**
 * The "Paused sessions" sidebar: every session in the store, with "Pull & resume".
 */
import { Dialog, showDialog } from '@jupyterlab/apputils';
import { IDocumentManager } from '@jupyterlab/docmanager';
import { refreshIcon } from '@jupyterlab/ui-components';
import { Message } from '@lumino/messaging';
import { Poll } from '@lumino/polling';
import { Widget } from '@lumino/widgets';

import { errorMessage, errorStatus, PauseAPI, showError } from './handler';
import { pausedSessionsIcon } from './icons';
import { ServerStatusModel } from './servermodel';
import {
  canPullAndResume,
  formatAge,
  formatBytes,
  formatDamage,
  formatPause,
  formatTime,
  IPullReply,
  isBusy,
  ISessionRow,
  MAX_INTERVAL,
  sortRows
} from './status';

/**
 * How often the panel lists the sessions again while it is shown (ms): faster while one of
 * them is being paused or resumed.
 */
const PANEL_INTERVAL = 10000;
const PANEL_BUSY_INTERVAL = 2000;

/**
 * The sidebar panel's id (also its DOM id).
 */
export const SESSIONS_PANEL_ID = 'jupyter-pause-sessions';

/**
 * DOM:
 *
 * ```
 * <div id="jupyter-pause-sessions" class="jp-PauseSessions">
 *   <header class="jp-PauseSessions-header">
 *     <h2 class="jp-PauseSessions-title">Paused sessions</h2>
 *     <button class="jp-PauseSessions-refresh" aria-label="Refresh paused sessions">
 *   </header>
 *   <div class="jp-PauseSessions-message" data-kind="empty|error|loading">...</div>
 *   <ul class="jp-PauseSessions-list">
 *     <li class="jp-PauseSessions-row" data-session="dir--nb" data-state="paused" data-release="<id>"
 *         data-damaged="<how many>">
 *       <div class="jp-PauseSessions-path">dir/nb.ipynb</div>
 *       <div class="jp-PauseSessions-meta">
 *         <span class="jp-PauseSessions-node">gpu-07</span>
 *         <span class="jp-PauseSessions-created">2026-11-29 10:15</span>
 *         <span class="jp-PauseSessions-size">1.2 GB</span>
 *         <span class="jp-PauseSessions-state">paused</span>
 *         <span class="jp-PauseSessions-release">paused by release</span>  (rows with data-release)
 *         <span class="jp-PauseSessions-damaged">1 damaged checkpoint</span>  (rows with data-damaged)
 *       </div>
 *       <button class="jp-PauseSessions-pull" aria-label="Pull & resume dir/nb.ipynb">Pull & resume</button>
 *     </li>
 *   </ul>
 * </div>
 * ```
 */
export class PausedSessionsPanel extends Widget {
  constructor(options: PausedSessionsPanel.IOptions) {
    super();
    this._docManager = options.docManager;
    this._server = options.server ?? null;
    this.id = SESSIONS_PANEL_ID;
    this.addClass('jp-PauseSessions');
    this.title.icon = pausedSessionsIcon;
    this.title.caption = 'Paused sessions';

    const header = document.createElement('header');
    header.className = 'jp-PauseSessions-header';
    const title = document.createElement('h2');
    title.className = 'jp-PauseSessions-title';
    title.textContent = 'Paused sessions';
    const refresh = document.createElement('button');
    refresh.className = 'jp-PauseSessions-refresh jp-Button jp-mod-minimal';
    refresh.type = 'button';
    refresh.title = 'Refresh';
    refresh.setAttribute('aria-label', 'Refresh paused sessions');
    refreshIcon.element({ container: refresh, tag: 'span' });
    refresh.addEventListener('click', () => void this.refresh());
    header.append(title, refresh);

    this._message = document.createElement('div');
    this._message.className = 'jp-PauseSessions-message';
    this._list = document.createElement('ul');
    this._list.className = 'jp-PauseSessions-list';

    this.node.append(header, this._message, this._list);
    this._showMessage('loading', 'Loading…');

    this._poll = new Poll<void, Error, 'standby'>({
      auto: false,
      factory: () => this._load(false),
      frequency: { interval: PANEL_INTERVAL, backoff: true, max: MAX_INTERVAL },
      name: 'jupyter-pause:sessions',
      standby: () => !this.isVisible || 'when-hidden'
    });
  }

  /**
   * The rows shown now.
   */
  get rows(): ReadonlyArray<ISessionRow> {
    return this._rows;
  }

  /**
   * Ask the server for the sessions again (the refresh button).
   */
  async refresh(): Promise<void> {
    try {
      await this._load(true);
    } catch {
      // Shown in the panel and as a notification already.
    }
  }

  dispose(): void {
    if (this.isDisposed) {
      return;
    }
    this._poll.dispose();
    super.dispose();
  }

  /**
   * Copy a session's notebook here, resume it, and open it.
   */
  async pullAndResume(row: ISessionRow): Promise<void> {
    let pulled: IPullReply | null;
    try {
      pulled = await this._pull(row.session);
    } catch (error) {
      showError(`Could not pull ${row.session}: ${errorMessage(error)}`);
      return;
    }
    if (!pulled) {
      return; // the user kept the notebook that is here
    }
    try {
      await PauseAPI.resume(pulled.path);
    } catch (error) {
      showError(`Could not resume ${pulled.path}: ${errorMessage(error)}`);
    }
    // Open it either way: the notebook shows the resume's progress (or why it is paused).
    this._docManager.openOrReveal(pulled.path);
    void this.refresh();
  }

  protected onAfterShow(msg: Message): void {
    super.onAfterShow(msg);
    if (this._poll.state.phase === 'constructed') {
      void this._poll.start();
    } else {
      void this._poll.refresh();
    }
  }

  private async _load(byUser: boolean): Promise<void> {
    const request = ++this._request;
    this.node.setAttribute('aria-busy', 'true');
    try {
      const reply = await PauseAPI.sessions();
      if (request !== this._request) {
        return;
      }
      this._serverNode = reply.node;
      this._lastError = null;
      const rows = sortRows(reply.sessions ?? []);
      this._render(rows);
      const interval = rows.some(row => isBusy(row.state))
        ? PANEL_BUSY_INTERVAL
        : PANEL_INTERVAL;
      if (this._poll.frequency.interval !== interval) {
        this._poll.frequency = { ...this._poll.frequency, interval };
      }
    } catch (error) {
      if (request === this._request && this._server?.stopping) {
        // Expected: the server is going away after a release.
        this._showMessage('stopped', 'The server is stopping; its sessions are paused.');
      } else if (request === this._request) {
        const message = errorMessage(error);
        this._showMessage('error', `Could not list sessions: ${message}`);
        if (byUser || message !== this._lastError) {
          showError(`Could not list paused sessions: ${message}`);
        }
        this._lastError = message;
      }
      throw error;
    } finally {
      if (request === this._request) {
        this.node.removeAttribute('aria-busy');
      }
    }
  }

  private async _pull(session: string): Promise<IPullReply | null> {
    try {
      return await PauseAPI.pull(session, false);
    } catch (error) {
      const message = errorMessage(error);
      // 409 "<path> exists here with different content; pass "overwrite": true to replace it"
      if (errorStatus(error) !== 409 || !message.includes('overwrite')) {
        throw error;
      }
      const result = await showDialog({
        title: 'Replace the notebook here?',
        body: message,
        buttons: [
          Dialog.cancelButton({ label: 'Keep mine' }),
          Dialog.warnButton({ label: 'Overwrite' })
        ]
      });
      if (!result.button.accept) {
        return null;
      }
      return PauseAPI.pull(session, true);
    }
  }

  private _render(rows: ISessionRow[]): void {
    this._rows = rows;
    this._list.replaceChildren(...rows.map(row => this._renderRow(row)));
    if (rows.length) {
      this._showMessage('', '');
    } else {
      this._showMessage('empty', 'No sessions in the store yet.');
    }
  }

  private _renderRow(row: ISessionRow): HTMLLIElement {
    const item = document.createElement('li');
    item.className = 'jp-PauseSessions-row';
    item.dataset.session = row.session;
    item.dataset.state = row.state;

    const path = document.createElement('div');
    path.className = 'jp-PauseSessions-path';
    path.textContent = row.path || row.session;
    path.title = `session ${row.session}` + (row.checkpoint ? `\ncheckpoint ${row.checkpoint}` : '');

    const meta = document.createElement('div');
    meta.className = 'jp-PauseSessions-meta';
    const node = Private.span('jp-PauseSessions-node', row.node || '?');
    if (row.node && row.node === this._serverNode) {
      node.title = 'this node';
    }
    const created = Private.span('jp-PauseSessions-created', formatTime(row.created));
    created.title = row.created ? `paused since ${formatAge(row.created)}` : '';
    const size = Private.span('jp-PauseSessions-size', formatBytes(row.bytes));
    const state = Private.span('jp-PauseSessions-state', row.state);
    state.title = row.detail || row.state;
    meta.append(node, created, size, state);
    const pause = formatPause(row);
    if (pause) {
      const span = Private.span('jp-PauseSessions-pause', pause);
      span.title =
        `paused since ${formatTime(row.paused_since)}; GPU-hours released: the GPUs its kernel ` +
        'held, times the time since (from the store\'s ledger)';
      meta.append(span);
    }
    if (row.release) {
      // Paused by "Pause all and stop server" (or the idle culler, or an eviction).
      item.dataset.release = row.release;
      const release = Private.span('jp-PauseSessions-release', 'paused by release');
      release.title = `paused with every session of its server, by release ${row.release}`;
      meta.append(release);
    }
    const damage = formatDamage(row);
    if (damage) {
      item.dataset.damaged = String(row.damaged?.length);
      const span = Private.span('jp-PauseSessions-damaged', damage[0]);
      span.title = damage[1];
      meta.append(span);
    }

    const pull = document.createElement('button');
    pull.type = 'button';
    pull.className = 'jp-PauseSessions-pull jp-Button jp-mod-styled jp-mod-accept';
    pull.textContent = 'Pull & resume';
    pull.setAttribute('aria-label', `Pull & resume ${row.path || row.session}`);
    pull.disabled = !canPullAndResume(row);
    pull.title = pull.disabled
      ? row.checkpoint
        ? `${row.state}: nothing to resume`
        : (damage?.[1] ?? 'no checkpoint: nothing to resume')
      : 'Copy the notebook here from the store, resume its kernel and open it';
    pull.addEventListener('click', async () => {
      pull.disabled = true;
      try {
        await this.pullAndResume(row);
      } finally {
        pull.disabled = !canPullAndResume(row);
      }
    });

    item.append(path, meta, pull);
    return item;
  }

  private _showMessage(kind: string, text: string): void {
    this._message.textContent = text;
    this._message.dataset.kind = kind;
    this._message.hidden = !text;
  }

  private _docManager: IDocumentManager;
  private _server: ServerStatusModel | null;
  private _lastError: string | null = null;
  private _poll: Poll<void, Error, 'standby'>;
  private _list: HTMLUListElement;
  private _message: HTMLDivElement;
  private _serverNode = '';
  private _request = 0;
  private _rows: ISessionRow[] = [];
}

export namespace PausedSessionsPanel {
  export interface IOptions {
    docManager: IDocumentManager;
    /**
     * The server's status: once a release stopped the server, failing to list is expected.
     */
    server?: ServerStatusModel;
  }
}

namespace Private {
  export function span(className: string, text: string): HTMLSpanElement {
    const element = document.createElement('span');
    element.className = className;
    element.textContent = text;
    return element;
  }
}
