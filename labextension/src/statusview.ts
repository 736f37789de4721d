import { Widget } from '@lumino/widgets';

import { PauseStatusModel } from './model';
import { describePreemption, formatPreemption, preemptionAttention } from './preemption';
import { describeRelease, formatRelease, showsRelease } from './release';
import { ServerStatusModel } from './servermodel';

/**
 * The notebook toolbar's status indicator: renders a PauseStatusModel, nothing more; while the
 * server releases (pauses everything and stops), it renders the release's progress instead.
 *
 * DOM: `<div class="jp-PauseStatus" data-state="paused" role="status" title="...">paused</div>`;
 * after a resume `data-verdict="restored|partial|..."`, during a release
 * `data-release="pausing|stopping|stopped|paused|failed"` as well. When the server's preemption
 * watcher cannot read its cloud's notice, or a pause would not fit the notice, the text says so
 * after the state (`ready · AWS notice unreadable`), with `data-preemption="blind|tight"`.
 */
export class PauseStatusView extends Widget {
  constructor(model: PauseStatusModel, server: ServerStatusModel | null = null) {
    super();
    this._model = model;
    this._server = server;
    this.addClass('jp-PauseStatus');
    this.node.setAttribute('role', 'status');
    this.node.setAttribute('aria-live', 'polite');
    model.stateChanged.connect(this._render, this);
    server?.changed.connect(this._render, this);
    this._render();
  }

  get model(): PauseStatusModel {
    return this._model;
  }

  dispose(): void {
    if (this.isDisposed) {
      return;
    }
    this._model.stateChanged.disconnect(this._render, this);
    this._server?.changed.disconnect(this._render, this);
    super.dispose();
  }

  private _render(): void {
    const model = this._model;
    const release = this._server?.release;
    this.node.dataset.state = model.displayState;
    const verdict = model.status?.verdict;
    if (verdict) {
      this.node.dataset.verdict = verdict;
    } else {
      delete this.node.dataset.verdict;
    }
    if (showsRelease(release, model.status)) {
      this.node.textContent = formatRelease(release);
      this.node.dataset.release = release.state;
      this.node.title = describeRelease(release);
      delete this.node.dataset.preemption;
    } else {
      const preemption = this._server?.status?.preemption;
      const problem = formatPreemption(preemption);
      this.node.textContent = problem ? `${model.text} · ${problem}` : model.text;
      delete this.node.dataset.release;
      const lines = [model.tooltip, ...describePreemption(preemption)];
      this.node.title = lines.filter(Boolean).join('\n');
      const attention = preemptionAttention(preemption);
      if (attention) {
        this.node.dataset.preemption = attention;
      } else {
        delete this.node.dataset.preemption;
      }
    }
  }

  private _model: PauseStatusModel;
  private _server: ServerStatusModel | null;
}
