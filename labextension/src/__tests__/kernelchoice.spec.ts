import { KernelSpec } from '@jupyterlab/services';

import { askResumeKernel, resumeKernelChoice, ResumeKernelBody } from '../kernelchoice';

const SPECS = {
  default: 'python3',
  kernelspecs: {
    python3: { name: 'python3', display_name: 'Python 3 (ipykernel)' },
    'env-b': { name: 'env-b', display_name: 'Env B' },
    echo: { name: 'echo', display_name: 'echo' }
  }
} as unknown as KernelSpec.ISpecModels;

describe('resumeKernelChoice', () => {
  it("starts on the notebook's kernelspec when this server has it", () => {
    const choice = resumeKernelChoice('Env-B', SPECS);
    expect(choice.present).toBe(true);
    expect(choice.initial).toBe('env-b');
    expect(choice.options).toEqual([
      { name: 'echo', label: 'echo' },
      { name: 'env-b', label: 'Env B (env-b)' },
      { name: 'python3', label: 'Python 3 (ipykernel) (python3)' }
    ]);
  });

  it("starts on the server's default when the notebook's kernelspec is missing", () => {
    const choice = resumeKernelChoice('env-gone', SPECS);
    expect(choice).toMatchObject({ recorded: 'env-gone', present: false, initial: 'python3' });
  });

  it('offers nothing while the kernelspecs are unknown', () => {
    expect(resumeKernelChoice(null, null)).toEqual({
      recorded: null,
      present: false,
      options: [],
      initial: ''
    });
  });
});

describe('the Resume dialog', () => {
  it('names the missing kernelspec and gives the one picked', () => {
    const body = new ResumeKernelBody('dir/nb.ipynb', resumeKernelChoice('env-gone', SPECS));
    expect(body.node.textContent).toContain(
      'dir/nb.ipynb ran on the kernel "env-gone", which this server does not have. Resume it in:'
    );
    const select = body.node.querySelector('select') as HTMLSelectElement;
    expect(body.getValue()).toBe('python3');
    select.value = 'env-b';
    expect(body.getValue()).toBe('env-b');
    body.dispose();
  });

  it("marks the notebook's own kernelspec when the user asks to pick", () => {
    const body = new ResumeKernelBody('nb.ipynb', resumeKernelChoice('env-b', SPECS));
    expect(body.node.textContent).toContain('Resume nb.ipynb in:');
    const selected = body.node.querySelector('option:checked');
    expect(selected?.textContent).toBe("Env B (env-b), the notebook's kernel");
    body.dispose();
  });

  it('resumes in the kernelspec picked, and in none when cancelled', async () => {
    const choice = resumeKernelChoice('env-gone', SPECS);
    const picked = askResumeKernel('nb.ipynb', choice);
    await new Promise(resolve => setTimeout(resolve, 0));
    const dialog = document.querySelector('.jp-Dialog')!;
    expect(dialog.textContent).toContain('which this server does not have. Resume it in:');
    (dialog.querySelector('select') as HTMLSelectElement).value = 'env-b';
    (dialog.querySelector('button.jp-mod-accept') as HTMLButtonElement).click();
    expect(await picked).toBe('env-b');

    const cancelled = askResumeKernel('nb.ipynb', choice);
    await new Promise(resolve => setTimeout(resolve, 0));
    (document.querySelector('.jp-Dialog button.jp-mod-reject') as HTMLButtonElement).click();
    expect(await cancelled).toBeNull();
  });
});
