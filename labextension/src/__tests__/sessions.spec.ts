import { Notification } from '@jupyterlab/apputils';
import { IDocumentManager } from '@jupyterlab/docmanager';

import { PauseAPI } from '../handler';
import { ServerStatusModel } from '../servermodel';
import { PausedSessionsPanel } from '../sessions';
import { formatDuration, formatGpuHours, ISessionRow } from '../status';
import { release, serverStatus } from './fixtures';

jest.mock('../handler', () => {
  const actual = jest.requireActual('../handler');
  return {
    ...actual,
    PauseAPI: { ...actual.PauseAPI, sessions: jest.fn(), pull: jest.fn(), resume: jest.fn() }
  };
});
const listSessions = PauseAPI.sessions as jest.Mock;
const pull = PauseAPI.pull as jest.Mock;
const resume = PauseAPI.resume as jest.Mock;

const RELEASE_ID = '20261130-161500-abc123';

function row(fields: Partial<ISessionRow>): ISessionRow {
  return {
    session: 'train--a',
    state: 'paused',
    detail: '',
    path: 'train/a.ipynb',
    node: 'gpu-07',
    checkpoint: '20261130-161502-d4e5f6',
    created: 1764519302,
    bytes: 1200,
    updated: 1764519302,
    release: null,
    ...fields
  };
}

describe('the Paused sessions panel shows what a pause gives back', () => {
  afterEach(() => jest.resetAllMocks());

  it('says how long each session has been paused and the GPU-hours released so far', async () => {
    const now = Date.now() / 1000;
    listSessions.mockResolvedValue({
      sessions: [
        row({ session: 'a', paused_since: now - (3 * 3600 + 20 * 60 + 5), gpu_hours_released: 6.67 }),
        row({ session: 'b', paused_since: now - 125, gpu_hours_released: null }),
        row({ session: 'c', state: 'ready', paused_since: null, gpu_hours_released: null })
      ],
      node: 'gpu-03'
    });
    const panel = new PausedSessionsPanel({ docManager: {} as IDocumentManager });
    await panel.refresh();
    const pause = (session: string) =>
      panel.node.querySelector(`li[data-session="${session}"] .jp-PauseSessions-pause`)?.textContent;
    expect(pause('a')).toBe('paused 3 h 20 min · 6.7 GPU-h released');
    expect(pause('b')).toBe('paused 2 min · GPU-h unknown'); // no record of the GPUs: not zero
    expect(pause('c')).toBeUndefined();
    panel.dispose();
  });

  it('names damaged checkpoints, and says when every one is', async () => {
    const bad = { checkpoint: '20261130-170000-aaaaaa', why: 'checksum mismatch' };
    listSessions.mockResolvedValue({
      sessions: [
        row({ session: 'a', damaged: [bad] }),
        row({ session: 'b', state: 'ready', checkpoint: null, created: null, damaged: [bad] }),
        row({ session: 'c', damaged: [] })
      ],
      node: 'gpu-03'
    });
    const panel = new PausedSessionsPanel({ docManager: {} as IDocumentManager });
    await panel.refresh();
    const item = (session: string) =>
      panel.node.querySelector<HTMLLIElement>(`li[data-session="${session}"]`)!;
    const damaged = (session: string) =>
      item(session).querySelector<HTMLElement>('.jp-PauseSessions-damaged');
    expect(item('a').dataset.damaged).toBe('1');
    expect(damaged('a')?.textContent).toBe('1 damaged checkpoint');
    expect(damaged('a')?.title).toBe(
      'checkpoint 20261130-170000-aaaaaa is damaged: checksum mismatch\n' +
        'a resume uses 20261130-161502-d4e5f6, the newest intact checkpoint'
    );
    expect(damaged('b')?.textContent).toBe('every checkpoint damaged');
    const pullB = item('b').querySelector<HTMLButtonElement>('.jp-PauseSessions-pull')!;
    expect(pullB.disabled).toBe(true);
    expect(pullB.title).toContain('nothing to resume: take a new checkpoint');
    expect(item('c').dataset.damaged).toBeUndefined();
    expect(damaged('c')).toBeNull();
    panel.dispose();
  });

  it('formats durations and GPU-hours for a person', () => {
    expect(formatDuration(59)).toBe('0 min');
    expect(formatDuration(7200)).toBe('2 h');
    expect(formatDuration(86400 + 4 * 3600 + 59)).toBe('1 day 4 h');
    expect(formatDuration(3 * 86400)).toBe('3 days');
    expect(formatGpuHours(0)).toBe('0 GPU-h');
    expect(formatGpuHours(0.046)).toBe('0.05 GPU-h');
    expect(formatGpuHours(130.4)).toBe('130 GPU-h');
    expect(formatGpuHours(undefined)).toBe('GPU-h unknown');
  });
});

describe('the Paused sessions panel after a release', () => {
  let panel: PausedSessionsPanel | null = null;
  let server: ServerStatusModel | null = null;

  afterEach(() => {
    panel?.dispose();
    server?.dispose();
    panel = server = null;
    Notification.dismiss();
    jest.resetAllMocks();
  });

  function makePanel(options: { server?: ServerStatusModel } = {}) {
    const opened: string[] = [];
    const docManager = {
      openOrReveal: jest.fn((path: string) => void opened.push(path))
    } as unknown as IDocumentManager;
    panel = new PausedSessionsPanel({ docManager, ...options });
    return { panel, opened };
  }

  it('marks the sessions a release paused', async () => {
    listSessions.mockResolvedValue({
      sessions: [row({ release: RELEASE_ID }), row({ session: 'b', path: 'b.ipynb' })],
      node: 'gpu-03',
      resume_on_open: true
    });
    const { panel } = makePanel();
    await panel.refresh();
    const item = (session: string) =>
      panel.node.querySelector<HTMLLIElement>(`li.jp-PauseSessions-row[data-session="${session}"]`)!;
    expect(item('train--a').dataset.release).toBe(RELEASE_ID);
    expect(item('train--a').querySelector('.jp-PauseSessions-release')?.textContent).toBe(
      'paused by release'
    );
    expect(item('b').dataset.release).toBeUndefined();
    expect(item('b').querySelector('.jp-PauseSessions-release')).toBeNull();
  });

  it('resumes a session whose notebook is not on this server, then opens it', async () => {
    const steps: string[] = [];
    // The notebook is missing here: the pull writes it from the checkpoint.
    pull.mockImplementation(async (session: string, overwrite: boolean) => {
      steps.push(`pull ${session} overwrite=${overwrite}`);
      return { path: 'train/a.ipynb', session, checkpoint: 'c', written: true };
    });
    resume.mockImplementation(async (path: string) => {
      steps.push(`resume ${path}`);
      return { session: 'train--a', state: 'waiting', path };
    });
    listSessions.mockResolvedValue({ sessions: [], node: 'gpu-03' });
    const { panel, opened } = makePanel();
    await panel.pullAndResume(row({ release: RELEASE_ID, node: 'gpu-07' }));
    steps.push(...opened.map(path => `open ${path}`));
    expect(steps).toEqual([
      'pull train--a overwrite=false',
      'resume train/a.ipynb',
      'open train/a.ipynb'
    ]);
  });

  it('says nothing alarming when it cannot list because the server stopped', async () => {
    const fetch = jest.fn(async () =>
      serverStatus({ release: release({ state: 'stopped', server_stop: 'stopped' }) })
    );
    server = new ServerStatusModel({ fetch, standby: 'never' });
    await server.ready;
    listSessions.mockRejectedValue(new TypeError('Failed to fetch'));
    const { panel } = makePanel({ server });
    await panel.refresh();
    expect(Notification.manager.notifications).toHaveLength(0);
    expect(panel.node.querySelector('.jp-PauseSessions-message')?.textContent).toBe(
      'The server is stopping; its sessions are paused.'
    );
  });
});
