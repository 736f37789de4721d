/**
 * Which kernelspec a Resume starts: the one the notebook ran on, when this server has it; else
 * the one the user picks in the Resume dialog, among those this server has.
 */
import { Dialog, showDialog } from '@jupyterlab/apputils';
import { KernelSpec } from '@jupyterlab/services';
import { Widget } from '@lumino/widgets';

/**
 * A kernelspec the user can pick: its name and the words shown for it.
 */
export interface IKernelOption {
  name: string;
  label: string;
}

/**
 * What the Resume dialog offers.
 */
export interface IResumeKernelChoice {
  /** The kernelspec the notebook ran on; null when nothing names one (the server falls back). */
  recorded: string | null;
  /** Whether this server has the recorded kernelspec. */
  present: boolean;
  /** The kernelspecs this server has, by display name. */
  options: IKernelOption[];
  /** The name the dialog starts on: the recorded one, else the server's default. */
  initial: string;
}

/**
 * The choice for a notebook that ran on `recorded`, given the server's kernelspecs (null
 * while unknown: nothing to offer). Kernelspec names are not case-sensitive.
 */
export function resumeKernelChoice(
  recorded: string | null | undefined,
  specs: KernelSpec.ISpecModels | null
): IResumeKernelChoice {
  const options: IKernelOption[] = Object.entries(specs?.kernelspecs ?? {})
    .filter(([, spec]) => !!spec)
    .map(([name, spec]) => ({
      name,
      label: spec!.display_name && spec!.display_name !== name ? `${spec!.display_name} (${name})` : name
    }))
    .sort((a, b) => a.label.localeCompare(b.label));
  const named = (wanted: string | null | undefined) =>
    wanted ? options.find(o => o.name.toLowerCase() === wanted.toLowerCase())?.name : undefined;
  const found = named(recorded);
  return {
    recorded: recorded || null,
    present: found !== undefined,
    options,
    initial: found ?? named(specs?.default) ?? options[0]?.name ?? ''
  };
}

/**
 * The Resume dialog's body: why it asks, and the kernelspecs to pick from.
 *
 * DOM:
 *
 * ```
 * <div class="jp-PauseResumeKernel">
 *   <p>dir/nb.ipynb ran on the kernel "env-a", which this server does not have. Resume it in:</p>
 *   <select class="jp-PauseResumeKernel-select" aria-label="Kernel to resume dir/nb.ipynb in">
 *     <option value="python3">Python 3 (ipykernel) (python3)</option>
 *   </select>
 * </div>
 * ```
 */
export class ResumeKernelBody extends Widget implements Dialog.IBodyWidget<string> {
  constructor(path: string, choice: IResumeKernelChoice) {
    super();
    this.addClass('jp-PauseResumeKernel');
    const intro = document.createElement('p');
    const recorded = choice.recorded;
    intro.textContent =
      recorded && !choice.present
        ? `${path} ran on the kernel "${recorded}", which this server does not have. Resume it in:`
        : `Resume ${path} in:`;
    this._select = document.createElement('select');
    this._select.className = 'jp-PauseResumeKernel-select';
    this._select.setAttribute('aria-label', `Kernel to resume ${path} in`);
    for (const option of choice.options) {
      const item = document.createElement('option');
      item.value = option.name;
      item.textContent =
        choice.present && option.name === choice.initial
          ? `${option.label}, the notebook's kernel`
          : option.label;
      this._select.append(item);
    }
    this._select.value = choice.initial;
    this.node.append(intro, this._select);
  }

  /**
   * The kernelspec picked.
   */
  getValue(): string {
    return this._select.value;
  }

  private _select: HTMLSelectElement;
}

/**
 * Show the Resume dialog; the kernelspec picked, or null when the user cancels.
 */
export async function askResumeKernel(
  path: string,
  choice: IResumeKernelChoice
): Promise<string | null> {
  const result = await showDialog({
    title: 'Resume in which kernel?',
    body: new ResumeKernelBody(path, choice),
    buttons: [Dialog.cancelButton({ label: 'Cancel' }), Dialog.okButton({ label: 'Resume' })]
  });
  return result.button.accept && result.value ? result.value : null;
}
