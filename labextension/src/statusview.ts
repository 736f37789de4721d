import { Widget } from '@lumino/widgets';

import { PauseStatusModel } from './model';

/**
 * The notebook toolbar's status indicator: renders a PauseStatusModel, nothing more.
 *
 * DOM: `<div class="jp-PauseStatus" data-state="paused" role="status" title="...">paused</div>`
 */
export class PauseStatusView extends Widget {
  constructor(model: PauseStatusModel) {
    super();
    this._model = model;
    this.addClass('jp-PauseStatus');
    this.node.setAttribute('role', 'status');
    this.node.setAttribute('aria-live', 'polite');
    model.stateChanged.connect(this._render, this);
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
    super.dispose();
  }

  private _render(): void {
    const model = this._model;
    this.node.textContent = model.text;
    this.node.dataset.state = model.displayState;
    this.node.title = model.tooltip;
  }

  private _model: PauseStatusModel;
}
