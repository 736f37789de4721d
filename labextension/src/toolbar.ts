/**
 * The notebook toolbar's Pause and Resume buttons: their words and the factory that makes them.
 */
import { CommandToolbarButton } from '@jupyterlab/ui-components';
import { CommandRegistry } from '@lumino/commands';

/**
 * What a button says: `label` is its visible text and accessible name, `caption` its tooltip.
 */
export interface IButtonText {
  label: string;
  caption: string;
}

/**
 * The Pause command's words (toolbar, palette, context menu).
 */
export const PAUSE_TEXT: IButtonText = {
  label: 'Pause',
  caption: 'Pause: save the notebook, checkpoint its kernel and shut the kernel down'
};

/**
 * The Resume command's words (toolbar, palette, context menu).
 */
export const RESUME_TEXT: IButtonText = {
  label: 'Resume',
  caption: 'Resume: start a kernel, restore the newest checkpoint and verify it'
};

/**
 * The words of Resume that asks first which kernelspec to start (palette).
 */
export const RESUME_IN_KERNEL_TEXT: IButtonText = {
  label: 'Resume in Kernel…',
  caption:
    'Resume: pick the kernel to start (the notebook\'s own, or another this server has), ' +
    'then restore the newest checkpoint into it and verify it'
};

/**
 * A toolbar button that runs `command` on the notebook panel `panelId`.
 *
 * It shows the command's icon and its label as text, so Pause does not read as one more icon
 * beside the kernel's interrupt square; the tooltip is the command's caption.
 */
export function createToolbarButton(
  commands: CommandRegistry,
  command: string,
  panelId: string
): CommandToolbarButton {
  const button = new CommandToolbarButton({
    commands,
    id: command,
    args: { toolbar: true, panelId },
    noFocusOnClick: true
  });
  button.addClass('jp-PauseToolbarButton');
  return button;
}
