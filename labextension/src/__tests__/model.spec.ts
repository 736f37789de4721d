import { PauseStatusModel } from '../model';
import { FAST_INTERVAL, IPauseStatus, SLOW_INTERVAL } from '../status';

function status(state: string, fields: Partial<IPauseStatus> = {}): IPauseStatus {
  return {
    session: 'nb',
    state,
    detail: '',
    path: 'nb.ipynb',
    node: 'n1',
    checkpoint: null,
    verdict: null,
    updated: 1,
    ...fields
  };
}

/** A fetch that answers from a queue, recording the paths it was asked about. */
function fakeFetch(answers: Array<IPauseStatus | Error>) {
  const asked: string[] = [];
  const fetch = jest.fn(async (path: string) => {
    asked.push(path);
    const answer = answers.length > 1 ? answers.shift()! : answers[0];
    if (answer instanceof Error) {
      throw answer;
    }
    return answer;
  });
  return { fetch, asked };
}

describe('PauseStatusModel', () => {
  let model: PauseStatusModel | null = null;

  afterEach(() => {
    model?.dispose();
    model = null;
  });

  it('starts unknown and takes the first answer', async () => {
    const { fetch, asked } = fakeFetch([status('paused', { checkpoint: 'c1' })]);
    model = new PauseStatusModel({ path: () => 'dir/nb.ipynb', fetch, standby: 'never' });
    expect(model.state).toBe('unknown');
    expect(model.text).toBe('…');
    await model.ready;
    expect(asked[0]).toBe('dir/nb.ipynb');
    expect(model.state).toBe('paused');
    expect(model.displayState).toBe('paused');
    expect(model.text).toBe('paused');
  });

  it('polls fast while busy and slowly otherwise', async () => {
    const { fetch } = fakeFetch([status('checkpointing'), status('paused')]);
    model = new PauseStatusModel({ path: () => 'nb.ipynb', fetch, standby: 'never' });
    await model.ready;
    expect(model.state).toBe('checkpointing');
    expect(model.interval).toBe(FAST_INTERVAL);
    await model.refresh();
    expect(model.state).toBe('paused');
    expect(model.interval).toBe(SLOW_INTERVAL);
  });

  it('emits stateChanged with the previous and current status, only on change', async () => {
    const { fetch } = fakeFetch([
      status('waiting', { detail: 'checking resources' }),
      status('waiting', { detail: 'checking resources' }),
      status('ready', { verdict: 'restored', checkpoint: 'c1' })
    ]);
    model = new PauseStatusModel({ path: () => 'nb.ipynb', fetch, standby: 'never' });
    const changes: Array<[string | undefined, string | undefined]> = [];
    model.stateChanged.connect((_, change) =>
      changes.push([change.previous?.state, change.current?.state])
    );
    await model.ready;
    await model.refresh();
    await model.refresh();
    expect(changes).toEqual([
      [undefined, 'waiting'],
      ['waiting', 'ready']
    ]);
    expect(model.text).toBe('ready · restored (c1)');
  });

  it('takes a status given directly (the reply of POST /pause)', async () => {
    const { fetch } = fakeFetch([status('ready')]);
    model = new PauseStatusModel({ path: () => 'nb.ipynb', fetch, standby: 'never' });
    await model.ready;
    model.update(status('checkpointing', { detail: 'waiting for the running cell to finish' }));
    expect(model.state).toBe('checkpointing');
    expect(model.interval).toBe(FAST_INTERVAL);
  });

  it('asks about the path the notebook has now', async () => {
    let path = 'old.ipynb';
    const { fetch, asked } = fakeFetch([status('ready')]);
    model = new PauseStatusModel({ path: () => path, fetch, standby: 'never' });
    await model.ready;
    path = 'new.ipynb';
    await model.refresh();
    expect(asked).toEqual(['old.ipynb', 'new.ipynb']);
  });

  it('shows a failed poll, reports it once, keeps the last status and recovers', async () => {
    const { fetch } = fakeFetch([
      status('paused'),
      new Error('404 Not Found'),
      new Error('404 Not Found'),
      status('paused')
    ]);
    const errors: string[] = [];
    model = new PauseStatusModel({
      path: () => 'nb.ipynb',
      fetch,
      standby: 'never',
      onError: message => errors.push(message)
    });
    await model.ready;
    await model.refresh();
    expect(model.displayState).toBe('error');
    expect(model.text).toBe('status unavailable: 404 Not Found');
    expect(model.state).toBe('paused'); // the last known state still guards the notebook
    await model.refresh();
    expect(errors).toEqual(['404 Not Found']);
    await model.refresh();
    expect(model.displayState).toBe('paused');
    expect(model.text).toBe('paused');
  });

  it('drops an answer asked before a direct update', async () => {
    let release: (value: IPauseStatus) => void = () => undefined;
    const fetch = jest.fn(
      () => new Promise<IPauseStatus>(resolve => (release = resolve))
    );
    model = new PauseStatusModel({ path: () => 'nb.ipynb', fetch, standby: 'never' });
    for (let i = 0; i < 50 && fetch.mock.calls.length === 0; i++) {
      await new Promise(resolve => setTimeout(resolve, 5));
    }
    expect(fetch).toHaveBeenCalledTimes(1);
    model.update(status('checkpointing'));
    release(status('ready')); // asked before the pause: stale
    await model.ready;
    expect(model.state).toBe('checkpointing');
  });

  it('stops polling when disposed', async () => {
    const { fetch } = fakeFetch([status('ready')]);
    model = new PauseStatusModel({ path: () => 'nb.ipynb', fetch, standby: 'never' });
    await model.ready;
    model.dispose();
    expect(model.isDisposed).toBe(true);
    const calls = fetch.mock.calls.length;
    await model.refresh();
    expect(fetch.mock.calls.length).toBe(calls);
  });
});
