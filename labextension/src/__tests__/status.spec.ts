import {
  canPullAndResume,
  describeStatus,
  FAST_INTERVAL,
  formatAge,
  formatBytes,
  formatError,
  formatStatus,
  formatTime,
  IPauseStatus,
  ISessionRow,
  isBusy,
  pollInterval,
  SLOW_INTERVAL,
  sortRows
} from '../status';

function status(fields: Partial<IPauseStatus>): IPauseStatus {
  return {
    session: 'dir--nb',
    state: 'ready',
    detail: '',
    path: 'dir/nb.ipynb',
    node: 'gpu-07',
    checkpoint: null,
    verdict: null,
    updated: 1764411300,
    ...fields
  };
}

function row(fields: Partial<ISessionRow>): ISessionRow {
  return {
    session: 's',
    state: 'paused',
    detail: '',
    path: 's.ipynb',
    node: 'gpu-07',
    checkpoint: '20261129-101500-a1b2c3',
    created: 1764411300,
    bytes: 1200,
    updated: null,
    ...fields
  };
}

describe('formatStatus', () => {
  it('says ready for a session nothing was done to', () => {
    expect(formatStatus(status({ state: 'ready', detail: 'not paused' }))).toBe('ready');
  });

  it('gives the verdict and checkpoint after a resume', () => {
    const text = formatStatus(
      status({
        state: 'ready',
        detail: 'restored: probe value of the paused kernel is back',
        checkpoint: '20261129-101500-a1b2c3',
        verdict: 'restored'
      })
    );
    expect(text).toBe('ready · restored (20261129-101500-a1b2c3)');
  });

  it('gives a partial verdict the same way', () => {
    expect(
      formatStatus(status({ state: 'ready', verdict: 'partial', checkpoint: 'c1' }))
    ).toBe('ready · partial (c1)');
  });

  it('leaves the checkpoint out when there is none', () => {
    expect(formatStatus(status({ state: 'ready', verdict: 'restored' }))).toBe(
      'ready · restored'
    );
  });

  it('names checkpointing, paused and restoring without their detail', () => {
    expect(
      formatStatus(status({ state: 'checkpointing', detail: 'waiting for the running cell to finish' }))
    ).toBe('checkpointing');
    expect(
      formatStatus(status({ state: 'paused', detail: 'kernel shut down; checkpoint c1', checkpoint: 'c1' }))
    ).toBe('paused');
    expect(
      formatStatus(status({ state: 'restoring', detail: 'restoring checkpoint c1' }))
    ).toBe('restoring');
  });

  it('says what a resume waits for', () => {
    expect(
      formatStatus(
        status({ state: 'waiting', detail: 'needs 1 CUDA device (cuda:0), none visible' })
      )
    ).toBe('waiting for resources: needs 1 CUDA device (cuda:0), none visible');
    expect(formatStatus(status({ state: 'waiting', detail: '' }))).toBe(
      'waiting for resources'
    );
  });

  it('says why it failed', () => {
    expect(
      formatStatus(
        status({
          state: 'failed',
          detail: 'pause failed: store unreachable; the kernel keeps running'
        })
      )
    ).toBe('failed: pause failed: store unreachable; the kernel keeps running');
    expect(formatStatus(status({ state: 'failed', detail: '' }))).toBe('failed');
  });

  it('shows a state it does not know with its detail', () => {
    expect(formatStatus(status({ state: 'migrating', detail: 'to gpu-09' }))).toBe(
      'migrating: to gpu-09'
    );
  });
});

describe('formatError', () => {
  it('says the status is unavailable and why', () => {
    expect(formatError('404 Not Found')).toBe('status unavailable: 404 Not Found');
  });
});

describe('describeStatus', () => {
  it('lists everything the server said', () => {
    const text = describeStatus(
      status({ state: 'paused', detail: 'kernel shut down', checkpoint: 'c1' })
    );
    expect(text).toContain('session dir--nb: paused');
    expect(text).toContain('kernel shut down');
    expect(text).toContain('checkpoint c1');
    expect(text).toContain('node gpu-07');
  });
});

describe('pollInterval', () => {
  it('polls fast while the server is working on the session', () => {
    for (const state of ['checkpointing', 'waiting', 'restoring']) {
      expect(isBusy(state)).toBe(true);
      expect(pollInterval(state)).toBe(FAST_INTERVAL);
    }
  });

  it('polls slowly otherwise', () => {
    for (const state of ['ready', 'paused', 'failed', 'unknown', null, undefined]) {
      expect(isBusy(state)).toBe(false);
      expect(pollInterval(state)).toBe(SLOW_INTERVAL);
    }
  });

  it('is about a second fast and five seconds slow', () => {
    expect(FAST_INTERVAL).toBe(1000);
    expect(SLOW_INTERVAL).toBe(5000);
  });
});

describe('formatBytes', () => {
  it('prints sizes the way the Python side does', () => {
    expect(formatBytes(0)).toBe('0 B');
    expect(formatBytes(999)).toBe('999 B');
    expect(formatBytes(150000)).toBe('150 kB');
    expect(formatBytes(999500)).toBe('1.0 MB');
    expect(formatBytes(1.5e6)).toBe('1.5 MB');
    expect(formatBytes(1.2e10)).toBe('12 GB');
    expect(formatBytes(5.5e12)).toBe('5.5 TB');
    expect(formatBytes(null)).toBe('0 B');
  });
});

describe('formatTime and formatAge', () => {
  it('prints a local date and minute', () => {
    const d = new Date(2026, 10, 29, 9, 5, 30);
    expect(formatTime(d.getTime() / 1000)).toBe('2026-11-29 09:05');
    expect(formatTime(null)).toBe('');
  });

  it('says how long ago', () => {
    const now = 1_000_000;
    expect(formatAge(now - 10, now)).toBe('just now');
    expect(formatAge(now - 300, now)).toBe('5 min ago');
    expect(formatAge(now - 3 * 3600, now)).toBe('3 h ago');
    expect(formatAge(now - 86400, now)).toBe('1 day ago');
    expect(formatAge(now - 3 * 86400, now)).toBe('3 days ago');
    expect(formatAge(undefined, now)).toBe('');
  });
});

describe('sessions panel rows', () => {
  it('offers Pull & resume only for a checkpoint no kernel holds', () => {
    expect(canPullAndResume(row({ state: 'paused' }))).toBe(true);
    expect(canPullAndResume(row({ state: 'failed' }))).toBe(true);
    expect(canPullAndResume(row({ state: 'ready' }))).toBe(false);
    expect(canPullAndResume(row({ state: 'restoring' }))).toBe(false);
    expect(canPullAndResume(row({ state: 'paused', checkpoint: null }))).toBe(false);
  });

  it('lists paused sessions first, newest first', () => {
    const rows = sortRows([
      row({ session: 'a', state: 'ready', created: 30 }),
      row({ session: 'b', state: 'paused', created: 10 }),
      row({ session: 'c', state: 'paused', created: 20 }),
      row({ session: 'd', state: 'ready', created: null })
    ]);
    expect(rows.map(r => r.session)).toEqual(['c', 'b', 'a', 'd']);
  });
});
