import { PauseStatusModel } from '../model';
import {
  describePreemption,
  formatPreemption,
  IPreemption,
  IPreemptionWatcher,
  preemptionAttention
} from '../preemption';
import { IServerStatus } from '../release';
import { ServerStatusModel } from '../servermodel';
import { IPauseStatus } from '../status';
import { PauseStatusView } from '../statusview';
import { serverStatus } from './fixtures';

function watcher(fields: Partial<IPreemptionWatcher> = {}): IPreemptionWatcher {
  return {
    cloud: 'aws',
    state: 'watching',
    error: '',
    url: 'http://169.254.169.254/latest/meta-data/spot/instance-action',
    lead_time: 120,
    polls: 12,
    noticed: null,
    trouble: '',
    ...fields
  };
}

function preemption(fields: Partial<IPreemption> = {}): IPreemption {
  return { notices: 'aws', watchers: [watcher()], fit: null, ...fields };
}

const BLIND_401 =
  'http://169.254.169.254/latest/meta-data/spot/instance-action answered HTTP 401; ' +
  'IMDSv2 refused the token: is this the instance\'s own metadata service?';

const TIGHT = {
  cloud: 'gce',
  lead_time: 30,
  seconds: 95,
  session: 'train',
  checkpoint: '20261203-101500-a1b2c3',
  fits: false,
  advice:
    'your last checkpoint took 95 s; a GCE notice gives 30 s: ' +
    'a pause at the notice would not finish in time'
};

describe('the preemption watcher, in words', () => {
  it('says nothing while the watcher is off or reads its notice', () => {
    for (const p of [null, undefined, preemption()]) {
      expect(preemptionAttention(p)).toBeNull();
      expect(formatPreemption(p)).toBe('');
    }
    expect(describePreemption(null)).toEqual([]);
    expect(describePreemption(preemption())).toEqual(['AWS preemption notice: watched']);
  });

  it('names a blind watcher and why', () => {
    const p = preemption({
      watchers: [
        watcher({ state: 'blind', error: BLIND_401 }),
        watcher({ cloud: 'gce', lead_time: 30 })
      ]
    });
    expect(preemptionAttention(p)).toBe('blind');
    expect(formatPreemption(p)).toBe('AWS notice unreadable');
    expect(describePreemption(p)[0]).toBe(
      `AWS preemption notice: cannot be read, a preemption would go unseen: ${BLIND_401}`
    );
  });

  it('warns when a pause would not fit the notice, with the advice', () => {
    const gce = watcher({ cloud: 'gce', lead_time: 30 });
    const p = preemption({ notices: 'gce', watchers: [gce], fit: TIGHT });
    expect(preemptionAttention(p)).toBe('tight');
    expect(formatPreemption(p)).toBe('pause exceeds the GCE notice');
    expect(describePreemption(p)).toContain(TIGHT.advice);
    const advice = 'your last checkpoint took 4 s; a GCE notice gives 30 s: a pause fits';
    const fits = { ...TIGHT, seconds: 4, fits: true, advice };
    expect(preemptionAttention({ ...p, fit: fits })).toBeNull();
  });

  it('says what "auto" is still looking for', () => {
    const p = preemption({
      notices: 'auto',
      watchers: [
        { cloud: null, state: 'searching', error: 'aws: no answer; gce: no answer; azure: no answer' }
      ]
    });
    expect(formatPreemption(p)).toBe('');
    expect(describePreemption(p)[0]).toMatch(
      /^preemption notices: no cloud metadata service answered yet \(aws: /
    );
  });
});

describe("the notebook's indicator", () => {
  let disposables: Array<{ dispose(): void }> = [];
  afterEach(() => {
    disposables.forEach(d => d.dispose());
    disposables = [];
  });

  function ready(): IPauseStatus {
    return {
      session: 'a',
      state: 'ready',
      detail: '',
      path: 'a.ipynb',
      node: 'gpu-07',
      checkpoint: null,
      verdict: null,
      updated: 1
    };
  }

  it("shows a blind watcher after the session's state, until it reads again", async () => {
    const answer: { current: IServerStatus } = {
      current: serverStatus({
        preemption: preemption({ watchers: [watcher({ state: 'blind', error: BLIND_401 })] })
      })
    };
    const server = new ServerStatusModel({ fetch: async () => answer.current, standby: 'never' });
    const model = new PauseStatusModel({
      path: () => 'a.ipynb',
      fetch: async () => ready(),
      standby: 'never'
    });
    const view = new PauseStatusView(model, server);
    disposables.push(view, model, server);
    await Promise.all([server.ready, model.ready]);
    expect(view.node.textContent).toBe('ready · AWS notice unreadable');
    expect(view.node.dataset.preemption).toBe('blind');
    expect(view.node.title).toContain(BLIND_401);

    answer.current = serverStatus({ preemption: preemption() });
    await server.refresh();
    expect(view.node.textContent).toBe('ready');
    expect(view.node.dataset.preemption).toBeUndefined();
    expect(view.node.title).toContain('AWS preemption notice: watched');

    answer.current = serverStatus({ preemption: null });
    await server.refresh();
    expect(view.node.title).not.toContain('preemption');
  });
});
