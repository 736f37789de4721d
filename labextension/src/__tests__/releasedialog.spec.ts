import { Notification } from '@jupyterlab/apputils';
import { ServerConnection } from '@jupyterlab/services';
import { CommandRegistry } from '@lumino/commands';

import { PauseAPI } from '../handler';
import { PauseStatusModel } from '../model';
import { IRelease, IServerStatus } from '../release';
import {
  addReleaseCommand,
  releaseDialogBody,
  ReleaseNotifier,
  runRelease
} from '../releasedialog';
import { ServerStatusModel } from '../servermodel';
import { IPauseStatus } from '../status';
import { PauseStatusView } from '../statusview';
import { release, serverStatus } from './fixtures';

jest.mock('../handler', () => {
  const actual = jest.requireActual('../handler');
  return { ...actual, PauseAPI: { ...actual.PauseAPI, release: jest.fn() } };
});
const postRelease = PauseAPI.release as jest.Mock;

const RELEASE = 'jupyter-pause:release';
const TWO_SESSIONS = [
  { path: 'train/a.ipynb', session: 'train--a', kernel_state: 'busy' },
  { path: 'b.ipynb', session: 'b', kernel_state: 'idle' }
];

/** A server whose answers the test changes by assigning `answer.current`. */
function fakeServer(first: IServerStatus | Error, page = {}) {
  const answer: { current: IServerStatus | Error } = { current: first };
  const fetch = jest.fn(async () => {
    if (answer.current instanceof Error) {
      throw answer.current;
    }
    return answer.current;
  });
  const server = new ServerStatusModel({ fetch, page, standby: 'never' });
  return { server, answer, fetch };
}

function notifications(): string[] {
  return Notification.manager.notifications.map(n => `${n.type}: ${n.message}`);
}

let disposables: Array<{ dispose(): void }> = [];
afterEach(() => {
  disposables.forEach(d => d.dispose());
  disposables = [];
  Notification.dismiss();
  postRelease.mockReset();
});

function track<T extends { dispose(): void }>(thing: T): T {
  disposables.push(thing);
  return thing;
}

describe('the Pause all and stop server command', () => {
  async function command(first: IServerStatus | Error, page = {}) {
    const fake = fakeServer(first, page);
    track(fake.server);
    const commands = new CommandRegistry();
    track(addReleaseCommand(commands, RELEASE, { server: fake.server, saveAll: async () => undefined }));
    return { commands, ...fake };
  }

  it('is shown and enabled when the server runs under a Hub', async () => {
    const { commands, server } = await command(serverStatus());
    await server.ready;
    expect(commands.label(RELEASE)).toBe('Pause All and Stop Server');
    expect(commands.isVisible(RELEASE)).toBe(true);
    expect(commands.isEnabled(RELEASE)).toBe(true);
  });

  it('is hidden outside a Hub, whatever the page config says', async () => {
    const { commands, server } = await command(serverStatus({ hub: null }), { hubUser: 'alice' });
    await server.ready;
    expect(commands.isVisible(RELEASE)).toBe(false);
    expect(commands.isEnabled(RELEASE)).toBe(false);
  });

  it("follows the page config while the server's status cannot be read", async () => {
    const inHub = await command(new Error('404 Not Found'), { hubUser: 'alice', hubPrefix: '/hub/' });
    await inHub.server.ready;
    expect(inHub.commands.isVisible(RELEASE)).toBe(true);
    const alone = await command(new Error('404 Not Found'), { hubUser: '', hubPrefix: '' });
    await alone.server.ready;
    expect(alone.commands.isVisible(RELEASE)).toBe(false);
  });

  it('is disabled while a release runs, and the menus hear of it', async () => {
    const { commands, server, answer } = await command(serverStatus());
    await server.ready;
    const changed: string[] = [];
    commands.commandChanged.connect((_, args) => changed.push(String(args.id)));
    answer.current = serverStatus({ release: release() });
    await server.refresh();
    expect(commands.isVisible(RELEASE)).toBe(true);
    expect(commands.isEnabled(RELEASE)).toBe(false);
    expect(changed).toContain(RELEASE);
  });
});

describe('the confirmation dialog', () => {
  it('lists the notebook sessions that will be paused, and says the server stops', () => {
    const body = releaseDialogBody(serverStatus({ sessions: TWO_SESSIONS }));
    const items = Array.from(body.node.querySelectorAll('li'));
    expect(items.map(li => li.dataset.path)).toEqual(['train/a.ipynb', 'b.ipynb']);
    expect(items[0].textContent).toBe('train/a.ipynb busy');
    const text = body.node.textContent ?? '';
    expect(text).toContain('These 2 notebook sessions will be paused');
    expect(text).toContain('this server stops and its GPU goes back');
    expect(text).toContain('Paused sessions panel');
    body.dispose();
  });

  it('says when there is nothing to pause, and how coming back works with resume_on_open', () => {
    const body = releaseDialogBody(serverStatus({ sessions: [], resume_on_open: true }));
    expect(body.node.querySelectorAll('li')).toHaveLength(0);
    expect(body.node.textContent).toContain('there is nothing to pause');
    expect(body.node.textContent).toContain('open a notebook: it resumes by itself');
    body.dispose();
  });
});

describe('runRelease', () => {
  it('asks with the current sessions, saves, then posts and follows the release', async () => {
    const { server, answer } = fakeServer(serverStatus({ sessions: TWO_SESSIONS }));
    track(server);
    const order: string[] = [];
    const asked: IServerStatus[] = [];
    postRelease.mockImplementation(async () => {
      order.push('post');
      answer.current = serverStatus({ release: release({ state: 'stopping' }) });
      return release();
    });
    const started = await runRelease({
      server,
      saveAll: async () => void order.push('save'),
      confirm: async status => {
        asked.push(status);
        order.push('confirm');
        return true;
      }
    });
    expect(order).toEqual(['confirm', 'save', 'post']);
    expect(asked[0].sessions.map(s => s.path)).toEqual(['train/a.ipynb', 'b.ipynb']);
    expect(started?.state).toBe('pausing');
    expect(server.releasing).toBe(true);
    await server.refresh();
    expect(server.release?.state).toBe('stopping');
  });

  it('pauses nothing when the user cancels, or when saving a notebook fails', async () => {
    const { server } = fakeServer(serverStatus());
    track(server);
    expect(await runRelease({ server, saveAll: async () => undefined, confirm: async () => false })).toBeNull();
    const failing = async () => {
      throw new Error('nb.ipynb: disk full');
    };
    expect(await runRelease({ server, saveAll: failing, confirm: async () => true })).toBeNull();
    expect(postRelease).not.toHaveBeenCalled();
    expect(notifications()).toEqual([
      'error: Nothing was paused: saving the open notebooks failed: nb.ipynb: disk full'
    ]);
  });

  it('follows the release already in progress when the server answers 409', async () => {
    const { server, answer } = fakeServer(serverStatus());
    track(server);
    const theirs: IRelease = release({ id: 'theirs', trigger: 'idle' });
    postRelease.mockImplementation(async () => {
      answer.current = serverStatus({ release: theirs });
      throw new ServerConnection.ResponseError(
        { status: 409 } as Response,
        'a release is already in progress'
      );
    });
    const joined = await runRelease({ server, saveAll: async () => undefined, confirm: async () => true });
    expect(joined?.id).toBe('theirs');
    expect(notifications().filter(n => n.startsWith('error'))).toEqual([]);
  });
});

describe('release progress', () => {
  function notebookStatus(fields: Partial<IPauseStatus> = {}): IPauseStatus {
    return {
      session: 'a',
      state: 'checkpointing',
      detail: '',
      path: 'a.ipynb',
      node: 'gpu-07',
      checkpoint: null,
      verdict: null,
      updated: 1,
      release: null,
      ...fields
    };
  }

  it("shows on each notebook's indicator, state by state", async () => {
    const { server, answer } = fakeServer(serverStatus());
    track(server);
    let mine = notebookStatus();
    const model = track(
      new PauseStatusModel({ path: () => 'a.ipynb', fetch: async () => mine, standby: 'never' })
    );
    const view = track(new PauseStatusView(model, server));
    await Promise.all([server.ready, model.ready]);
    expect(view.node.textContent).toBe('checkpointing');
    expect(view.node.dataset.release).toBeUndefined();

    const seen: Array<[string, string | undefined]> = [];
    const two = release();
    const onePaused = release();
    onePaused.sessions[0].state = 'paused';
    const MISSING_SCOPE = 'add delete:servers!server to c.Spawner.server_token_scopes';
    for (const r of [
      two,
      onePaused,
      release({ state: 'stopping' }),
      release({ state: 'paused', server_stop: 'missing-scope', detail: MISSING_SCOPE })
    ]) {
      answer.current = serverStatus({ release: r });
      mine = notebookStatus({ state: 'paused', release: r.id });
      await server.refresh();
      await model.refresh();
      seen.push([view.node.textContent ?? '', view.node.dataset.release]);
    }
    expect(seen).toEqual([
      ['pausing 2 sessions', 'pausing'],
      ['pausing 2 sessions (1 paused)', 'pausing'],
      ['stopping the server', 'stopping'],
      [`paused, server not stopped: ${MISSING_SCOPE}`, 'paused']
    ]);
    expect(view.node.title).toContain('a.ipynb: checkpointing');

    // Resumed: the notebook shows its own state again.
    mine = notebookStatus({ state: 'ready', verdict: 'restored', checkpoint: 'c1' });
    await model.refresh();
    expect(view.node.textContent).toBe('ready · restored (c1)');
    expect(view.node.dataset.release).toBeUndefined();
    expect(view.node.dataset.verdict).toBe('restored');
  });

  it('shows the server stopped, and stops asking a server that is going away', async () => {
    const { server, answer, fetch } = fakeServer(serverStatus({ release: release() }));
    track(server);
    const model = track(
      new PauseStatusModel({
        path: () => 'a.ipynb',
        fetch: async () => notebookStatus({ state: 'paused' }),
        standby: 'never'
      })
    );
    const view = track(new PauseStatusView(model, server));
    await Promise.all([server.ready, model.ready]);
    answer.current = serverStatus({ release: release({ state: 'stopped', server_stop: 'stopped' }) });
    await server.refresh();
    expect(view.node.textContent).toBe('server stopped · sessions paused');
    expect(view.node.dataset.release).toBe('stopped');
    expect(server.stopping).toBe(true);
    const calls = fetch.mock.calls.length;
    answer.current = new Error('Failed to fetch');
    await server.refresh();
    expect(fetch.mock.calls.length).toBe(calls);
  });

  it('shows the server gone when it stops answering mid-release, and stays quiet about it', async () => {
    const { server, answer } = fakeServer(serverStatus({ release: release() }));
    track(server);
    const commands = new CommandRegistry();
    track(addReleaseCommand(commands, RELEASE, { server, saveAll: async () => undefined }));
    const model = track(
      new PauseStatusModel({
        path: () => 'a.ipynb',
        fetch: async () => notebookStatus(),
        standby: 'never'
      })
    );
    const view = track(new PauseStatusView(model, server));
    await Promise.all([server.ready, model.ready]);
    track(new ReleaseNotifier(server, null));
    expect(view.node.textContent).toBe('pausing 2 sessions');
    // The Hub stopped the server before a poll saw "stopping" or "stopped".
    answer.current = new Error('Failed to fetch');
    await server.refresh().catch(() => undefined);
    expect(server.stopping).toBe(true);
    expect(view.node.dataset.release).toBe('lost');
    expect(view.node.textContent).toBe('server gone during the release');
    expect(commands.isEnabled(RELEASE)).toBe(false);
    expect(notifications()).toEqual([expect.stringMatching(/^success: The server went away mid-release/)]);
    // A blip, not a stop: the server answers again and the release goes on.
    answer.current = serverStatus({ release: release({ state: 'stopping' }) });
    await server.refresh();
    expect(server.stopping).toBe(false);
    expect(view.node.textContent).toBe('stopping the server');
  });

  it('is told in one notification, updated in place to the end', async () => {
    const { server, answer } = fakeServer(serverStatus());
    track(server);
    await server.ready;
    track(new ReleaseNotifier(server, 'https://hub.example/hub/home'));
    for (const state of ['pausing', 'stopping', 'stopped']) {
      answer.current = serverStatus({ release: release({ state }) });
      await server.refresh();
    }
    const all = Notification.manager.notifications;
    expect(all).toHaveLength(1);
    expect(all[0].type).toBe('success');
    expect(all[0].message).toContain('JupyterLab loses its connection now');
    expect(all[0].options.actions?.map(a => a.label)).toEqual(['Hub Control Panel']);
  });

  it('ends in a warning with the reason behind Details when the server was not stopped', async () => {
    const { server, answer } = fakeServer(serverStatus({ release: release() }));
    track(server);
    await server.ready;
    track(new ReleaseNotifier(server, 'https://hub.example/hub/home'));
    const reason = 'the Hub refused to stop the server: add it to c.Spawner.server_token_scopes';
    answer.current = serverStatus({
      release: release({ state: 'paused', server_stop: 'missing-scope', detail: reason })
    });
    await server.refresh();
    const all = Notification.manager.notifications;
    expect(all.map(n => [n.type, n.message])).toEqual([
      ['warning', 'Every session is paused, but the server was not stopped.']
    ]);
    const details = all[0].options.actions!.find(a => a.label === 'Details')!;
    details.callback(new MouseEvent('click'));
    await new Promise(resolve => setTimeout(resolve, 0));
    expect(document.querySelector('.jp-Dialog')?.textContent).toContain(reason);
    (document.querySelector('.jp-Dialog button.jp-mod-accept') as HTMLButtonElement).click();
    await new Promise(resolve => setTimeout(resolve, 0));
    expect(all[0].options.actions!.map(a => a.label)).toEqual(['Details']); // no Hub link: it runs
  });

  it('does not announce a release that was over before the page loaded', async () => {
    const over = release({ state: 'paused', detail: 'no Hub: the server keeps running' });
    const { server } = fakeServer(serverStatus({ release: over }));
    track(server);
    await server.ready;
    track(new ReleaseNotifier(server, null));
    await server.refresh();
    expect(Notification.manager.notifications).toHaveLength(0);
  });
});
