import { CommandRegistry } from '@lumino/commands';
import { ReadonlyPartialJSONObject } from '@lumino/coreutils';
import { Widget } from '@lumino/widgets';

import { createToolbarButton, IButtonText, PAUSE_TEXT, RESUME_TEXT } from '../toolbar';

/** A registry with one command, as the plugin declares it, recording what it was run with. */
function registry(id: string, text: IButtonText, enabled = true) {
  const runs: ReadonlyPartialJSONObject[] = [];
  const commands = new CommandRegistry();
  commands.addCommand(id, {
    label: text.label,
    caption: text.caption,
    isEnabled: () => enabled,
    execute: args => {
      runs.push(args);
    }
  });
  return { commands, runs };
}

/** Attach the button and wait for React to render its `jp-button`. */
async function render(button: Widget): Promise<HTMLElement> {
  Widget.attach(button, document.body);
  for (let i = 0; i < 100; i++) {
    const element = button.node.querySelector<HTMLElement>('jp-button');
    if (element) {
      return element;
    }
    await new Promise(resolve => setTimeout(resolve, 5));
  }
  throw new Error('the toolbar button never rendered');
}

describe('createToolbarButton', () => {
  let button: Widget | null = null;

  afterEach(() => {
    button?.dispose();
    button = null;
  });

  it.each([
    ['jupyter-pause:pause', PAUSE_TEXT],
    ['jupyter-pause:resume', RESUME_TEXT]
  ])('shows %s as visible text, with its caption as tooltip', async (id, text) => {
    const { commands } = registry(id, text);
    button = createToolbarButton(commands, id, 'notebook-1');
    const element = await render(button);
    const label = element.querySelector('.jp-ToolbarButtonComponent-label');
    expect(label?.textContent).toBe(text.label);
    expect(element.getAttribute('aria-label')).toBe(text.label);
    expect(element.getAttribute('title')).toBe(text.caption);
    expect(element.dataset.command).toBe(id);
  });

  it('says which is which in words, not only by icon', () => {
    expect(PAUSE_TEXT.label).toBe('Pause');
    expect(RESUME_TEXT.label).toBe('Resume');
    // A toolbar's get_by_role("button", name=...) matches substrings: neither may hold the other.
    expect(PAUSE_TEXT.caption.toLowerCase()).not.toContain('resume');
    expect(RESUME_TEXT.caption.toLowerCase()).not.toContain('pause');
  });

  it('runs its command on the notebook whose toolbar it sits in', async () => {
    const { commands, runs } = registry('jupyter-pause:pause', PAUSE_TEXT);
    button = createToolbarButton(commands, 'jupyter-pause:pause', 'notebook-7');
    const element = await render(button);
    // It acts on mousedown (noFocusOnClick): the notebook keeps its focused cell.
    element.dispatchEvent(new MouseEvent('mousedown', { bubbles: true, button: 0 }));
    await new Promise(resolve => setTimeout(resolve, 0));
    expect(runs).toEqual([{ toolbar: true, panelId: 'notebook-7' }]);
  });

  it('is disabled while its command cannot apply, and keeps its text', async () => {
    const { commands } = registry('jupyter-pause:resume', RESUME_TEXT, false);
    button = createToolbarButton(commands, 'jupyter-pause:resume', 'notebook-1');
    const element = await render(button);
    expect(element.getAttribute('aria-disabled')).toBe('true');
    expect(element.textContent).toContain('Resume');
  });
});
