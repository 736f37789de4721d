import { Notification } from '@jupyterlab/apputils';
import { NotebookPanel } from '@jupyterlab/notebook';
import { KernelSpec, Session } from '@jupyterlab/services';
import { Signal } from '@lumino/signaling';

import { kernelStartAction, NotebookPauseController } from '../controller';
import { PauseAPI } from '../handler';
import { IResumeKernelChoice } from '../kernelchoice';
import { IPauseStatus } from '../status';

jest.mock('../handler', () => {
  const actual = jest.requireActual('../handler');
  return {
    ...actual,
    PauseAPI: { ...actual.PauseAPI, status: jest.fn(), resume: jest.fn(), pause: jest.fn() }
  };
});
const fetchStatus = PauseAPI.status as jest.Mock;
const postResume = PauseAPI.resume as jest.Mock;
const postPause = PauseAPI.pause as jest.Mock;

function status(state: string, fields: Partial<IPauseStatus> = {}): IPauseStatus {
  return {
    session: 'a',
    state,
    detail: '',
    path: 'a.ipynb',
    node: 'gpu-07',
    checkpoint: 'c1',
    verdict: null,
    updated: 1,
    release: null,
    ...fields
  };
}

/** Just what the controller uses of a NotebookPanel, its session context and the sessions. */
function fakeNotebook(collaborative = false) {
  const owner = {};
  const startKernel = jest.fn(async () => false);
  const sessionContext = {
    isReady: false,
    isDisposed: false,
    session: null,
    startKernel,
    kernelChanged: new Signal<object, unknown>(owner)
  };
  const panel = {
    id: 'notebook-1',
    context: { path: 'a.ipynb', save: jest.fn(async () => undefined), model: { collaborative } },
    sessionContext,
    disposed: new Signal<object, void>(owner)
  } as unknown as NotebookPanel;
  const sessions = {
    refreshRunning: jest.fn(async () => undefined),
    running: () => [][Symbol.iterator]()
  } as unknown as Session.IManager;
  return { panel, sessionContext, startKernel, sessions };
}

/** The controller a test made; disposed, and the mocked endpoints reset, after each test. */
let controller: NotebookPauseController | null = null;

afterEach(() => {
  controller?.dispose();
  controller = null;
  fetchStatus.mockReset();
  postResume.mockReset();
  postPause.mockReset();
});

describe('kernelStartAction (the guard against a fresh kernel in a paused session)', () => {
  it.each([
    // state, started by the user, resume_on_open, action
    ['paused', false, false, 'none'],
    ['paused', false, true, 'resume'],
    ['paused', true, false, 'ask'],
    ['paused', true, true, 'ask'],
    ['waiting', true, true, 'busy'],
    ['restoring', false, true, 'none'],
    ['ready', false, true, 'start'],
    ['failed', true, false, 'start'],
    [undefined, false, true, 'start']
  ] as const)('%s, by user %s, resume_on_open %s: %s', (state, byUser, onOpen, action) => {
    expect(kernelStartAction(state, byUser, onOpen)).toBe(action);
  });
});

describe('opening a paused notebook', () => {
  function open(resumeOnOpen: boolean) {
    const fake = fakeNotebook();
    const resumes: string[] = [];
    controller = new NotebookPauseController({
      panel: fake.panel,
      sessions: fake.sessions,
      // What the Resume command does.
      onResumeRequested: c => {
        resumes.push(c.path);
        void c.resume();
      },
      resumeOnOpen: async () => resumeOnOpen
    });
    return { ...fake, resumes };
  }

  it('resumes it, instead of waiting for Resume, when the server says resume_on_open', async () => {
    fetchStatus.mockResolvedValue(status('paused'));
    postResume.mockResolvedValue(status('waiting', { detail: 'checking resources' }));
    const { panel, startKernel, resumes } = open(true);
    // The start that opening the notebook does (before the session context is ready).
    expect(await panel.sessionContext.startKernel()).toBe(false);
    expect(startKernel).not.toHaveBeenCalled();
    expect(resumes).toEqual(['a.ipynb']);
    await new Promise(resolve => setTimeout(resolve, 0));
    // No kernelspec picked: the server starts the one the session recorded.
    expect(postResume).toHaveBeenCalledWith('a.ipynb', undefined);
    expect(document.querySelector('.jp-Dialog')).toBeNull();
  });

  it('starts nothing and resumes nothing without resume_on_open', async () => {
    fetchStatus.mockResolvedValue(status('paused'));
    const { panel, startKernel, resumes } = open(false);
    expect(await panel.sessionContext.startKernel()).toBe(false);
    expect(startKernel).not.toHaveBeenCalled();
    expect(resumes).toEqual([]);
    expect(postResume).not.toHaveBeenCalled();
  });

  it("still asks when the user runs a cell in a notebook paused here, resume_on_open or not", async () => {
    fetchStatus.mockResolvedValue(status('paused'));
    const { panel, sessionContext, resumes } = open(true);
    await controller!.model.ready;
    sessionContext.isReady = true;
    expect(await panel.sessionContext.startKernel()).toBe(false);
    await new Promise(resolve => setTimeout(resolve, 0));
    const dialog = document.querySelector('.jp-Dialog');
    expect(dialog?.textContent).toContain('This session is paused');
    expect(resumes).toEqual([]);
    (dialog!.querySelector('button.jp-mod-reject') as HTMLButtonElement).click();
    await new Promise(resolve => setTimeout(resolve, 0));
    expect(document.querySelector('.jp-Dialog')).toBeNull();
  });

  it('starts the kernel of a notebook that is not paused', async () => {
    fetchStatus.mockResolvedValue(status('ready'));
    const { panel, startKernel, resumes } = open(true);
    await panel.sessionContext.startKernel();
    expect(startKernel).toHaveBeenCalledTimes(1);
    expect(resumes).toEqual([]);
  });
});

describe("Resume and the notebook's kernelspec", () => {
  /** The server's kernelspecs, as JupyterLab's kernelspec manager holds them. */
  const kernelspecs = {
    ready: Promise.resolve(),
    specs: {
      default: 'python3',
      kernelspecs: {
        python3: { name: 'python3', display_name: 'Python 3 (ipykernel)' },
        'env-b': { name: 'env-b', display_name: 'Env B' }
      }
    }
  } as unknown as KernelSpec.IManager;

  async function paused(kernel: string | null, answer: string | null = 'python3') {
    fetchStatus.mockResolvedValue(status('paused', { kernel }));
    postResume.mockResolvedValue(status('waiting'));
    const asked: IResumeKernelChoice[] = [];
    controller = new NotebookPauseController({
      panel: fakeNotebook().panel,
      sessions: fakeNotebook().sessions,
      onResumeRequested: () => undefined,
      kernelspecs,
      askKernel: async (_, choice) => {
        asked.push(choice);
        return answer;
      }
    });
    await controller.model.ready;
    return asked;
  }

  it('resumes in the kernelspec the session recorded, without asking, when this server has it', async () => {
    const asked = await paused('env-b');
    await controller!.resume();
    expect(asked).toEqual([]);
    expect(postResume).toHaveBeenCalledWith('a.ipynb', undefined);
  });

  it('asks which kernelspec when this server lacks the recorded one, and resumes in the pick', async () => {
    const asked = await paused('env-gone');
    await controller!.resume();
    expect(asked).toHaveLength(1);
    expect(asked[0].recorded).toBe('env-gone');
    expect(asked[0].present).toBe(false);
    expect(asked[0].options.map(o => o.name)).toEqual(['env-b', 'python3']);
    expect(postResume).toHaveBeenCalledWith('a.ipynb', 'python3');
  });

  it('resumes nothing when the user cancels the dialog', async () => {
    await paused('env-gone', null);
    await controller!.resume();
    expect(postResume).not.toHaveBeenCalled();
  });

  it('asks when the user wants to pick, starting on the notebook\'s kernelspec', async () => {
    const asked = await paused('env-b', 'env-b');
    await controller!.resume({ pickKernel: true });
    expect(asked[0].initial).toBe('env-b');
    expect(postResume).toHaveBeenCalledWith('a.ipynb', 'env-b');
  });
});

describe('Pause', () => {
  /** Pause a ready notebook whose save does `save` (default: succeeds); what was done, in order. */
  async function pause(collaborative: boolean, save?: () => Promise<void>) {
    fetchStatus.mockResolvedValue(status('ready'));
    const order: string[] = [];
    postPause.mockImplementation(async () => {
      order.push('pause');
      return status('checkpointing');
    });
    const fake = fakeNotebook(collaborative);
    (fake.panel.context.save as jest.Mock).mockImplementation(save ?? (async () => void order.push('save')));
    controller = new NotebookPauseController({
      panel: fake.panel,
      sessions: fake.sessions,
      onResumeRequested: () => undefined
    });
    await controller.model.ready;
    await controller.pause();
    return order;
  }

  it('saves the notebook, then asks the server to pause it', async () => {
    expect(await pause(false)).toEqual(['save', 'pause']);
    expect(postPause).toHaveBeenCalledWith('a.ipynb');
  });

  it("leaves a collaborative notebook's save to the server's pause, which saves its shared document", async () => {
    expect(await pause(true)).toEqual(['pause']);
  });

  it('pauses nothing when the save fails, and says why', async () => {
    const failing = async () => {
      throw new Error('disk full');
    };
    expect(await pause(false, failing)).toEqual([]);
    expect(postPause).not.toHaveBeenCalled();
    const said = Notification.manager.notifications.map(n => `${n.type}: ${n.message}`);
    expect(said).toEqual(['error: Not paused: saving a.ipynb failed: disk full']);
    Notification.dismiss();
  });
});

describe("the resume's kernel", () => {
  /** A notebook resuming, whose server session holds the resume's kernel once `started`. */
  function resuming() {
    const fake = fakeNotebook();
    const adopted: unknown[] = [];
    const kernel = { id: 'k1', name: 'python3' };
    let started = false;
    const running = () =>
      (started ? [{ id: 's1', path: 'a.ipynb', kernel }] : [])[Symbol.iterator]();
    const connectTo = jest.fn(({ model }: { model: unknown }) => ({ model }));
    Object.assign(fake.sessions, { running, connectTo });
    Object.assign(fake.sessionContext, {
      _handleNewSession: (connection: unknown) => {
        adopted.push(connection);
        (fake.sessionContext as any).session = { kernel };
      }
    });
    controller = new NotebookPauseController({
      panel: fake.panel,
      sessions: fake.sessions,
      onResumeRequested: () => undefined
    });
    return { adopted, start: () => (started = true), refreshRunning: fake.sessions.refreshRunning as jest.Mock };
  }

  it('is connected to the notebook while it restores, once it is there, and only once', async () => {
    const { adopted, start, refreshRunning } = resuming();
    fetchStatus.mockResolvedValue(status('paused'));
    await controller!.model.ready;
    fetchStatus.mockResolvedValue(status('restoring', { detail: 'starting a python3 kernel' }));
    await controller!.model.refresh();
    await new Promise(resolve => setTimeout(resolve, 0));
    expect(refreshRunning).toHaveBeenCalled();
    expect(adopted).toEqual([]); // the server has not started it yet
    start();
    fetchStatus.mockResolvedValue(status('restoring', { detail: 'restoring checkpoint c1' }));
    await controller!.model.refresh();
    await new Promise(resolve => setTimeout(resolve, 0));
    expect(adopted).toEqual([{ model: { id: 's1', path: 'a.ipynb', kernel: { id: 'k1', name: 'python3' } } }]);
    fetchStatus.mockResolvedValue(status('ready', { verdict: 'restored', detail: 'restored: bit-identical' }));
    await controller!.model.refresh();
    await new Promise(resolve => setTimeout(resolve, 0));
    expect(adopted).toHaveLength(1); // the notebook holds it already
    Notification.dismiss();
  });
});
