import {
  describeRelease,
  formatCountdown,
  formatRelease,
  isReleaseActive,
  isUnderHub,
  lostRelease,
  NOTICE_LENGTH,
  releaseNotice,
  showsRelease,
  warningMessage
} from '../release';
import { IPauseStatus } from '../status';
import { release, serverStatus } from './fixtures';

function status(fields: Partial<IPauseStatus>): IPauseStatus {
  return {
    session: 'a',
    state: 'paused',
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

const MISSING_SCOPE =
  'every session is paused, but the Hub refused to stop the server: its token lacks ' +
  'delete:servers!server; add it to c.Spawner.server_token_scopes';

describe('formatRelease (the indicator during a release)', () => {
  it('counts the sessions being paused, then those done', () => {
    expect(formatRelease(release())).toBe('pausing 2 sessions');
    const oneDone = release();
    oneDone.sessions[0].state = 'paused';
    expect(formatRelease(oneDone)).toBe('pausing 2 sessions (1 paused)');
    expect(formatRelease(release({ sessions: [release().sessions[0]] }))).toBe(
      'pausing 1 session'
    );
  });

  it('says "every session" before the server has listed them', () => {
    expect(formatRelease(release({ sessions: [] }))).toBe('pausing every session');
  });

  it('says the server is gone when it stopped answering mid-release', () => {
    const lost = lostRelease(release({ state: 'stopping' }));
    expect(formatRelease(lost)).toBe('server gone during the release');
    expect(lost.detail).toBe(
      'the server stopped answering while the release was stopping; it has most likely been stopped'
    );
    expect(showsRelease(lost, null)).toBe(true);
  });

  it('says when the server is being stopped, and when it stopped', () => {
    expect(formatRelease(release({ state: 'stopping' }))).toBe('stopping the server');
    expect(formatRelease(release({ state: 'stopped', server_stop: 'stopped' }))).toBe(
      'server stopped · sessions paused'
    );
  });

  it("gives the server's sentence when the server was not stopped", () => {
    expect(
      formatRelease(release({ state: 'paused', server_stop: 'missing-scope', detail: MISSING_SCOPE }))
    ).toBe(`paused, server not stopped: ${MISSING_SCOPE}`);
  });

  it('names the session that failed when the release has no sentence of its own', () => {
    const failed = release({ state: 'failed' });
    failed.sessions[1] = { ...failed.sessions[1], state: 'failed', detail: 'kernel died' };
    expect(formatRelease(failed)).toBe('release failed: b.ipynb: kernel died');
    expect(formatRelease(release({ state: 'failed', detail: '1 of 2 pauses failed' }))).toBe(
      'release failed: 1 of 2 pauses failed'
    );
  });

  it('lists every session in the tooltip', () => {
    expect(describeRelease(release({ state: 'stopping' })).split('\n')).toEqual([
      'release 20261130-161500-abc123 (button): stopping',
      'a.ipynb: checkpointing',
      'b.ipynb: checkpointing'
    ]);
  });
});

describe('showsRelease (which notebooks show it)', () => {
  it('shows a running or stopped release on every notebook', () => {
    for (const state of ['pausing', 'stopping', 'stopped']) {
      expect(showsRelease(release({ state }), status({ state: 'ready' }))).toBe(true);
      expect(showsRelease(release({ state }), null)).toBe(true);
    }
    expect(isReleaseActive(release({ state: 'stopping' }))).toBe(true);
    expect(isReleaseActive(release({ state: 'stopped' }))).toBe(false);
  });

  it('keeps an unfinished release only on the notebooks it paused, until they are resumed', () => {
    const over = release({ state: 'paused', detail: MISSING_SCOPE });
    expect(showsRelease(over, status({ release: over.id }))).toBe(true);
    expect(showsRelease(over, status({ release: over.id, state: 'ready' }))).toBe(false);
    expect(showsRelease(over, status({ release: null }))).toBe(false);
    expect(showsRelease(null, status({}))).toBe(false);
  });
});

describe('isUnderHub', () => {
  it("takes the server's word once it answered", () => {
    expect(isUnderHub(serverStatus(), {})).toBe(true);
    expect(isUnderHub(serverStatus({ hub: null }), { hubUser: 'alice' })).toBe(false);
  });

  it('takes the page config before the server answered', () => {
    expect(isUnderHub(null, { hubUser: 'alice', hubPrefix: '/hub/' })).toBe(true);
    expect(isUnderHub(null, { hubUser: '', hubPrefix: '' })).toBe(false);
    expect(isUnderHub(null, {})).toBe(false);
  });
});

describe('releaseNotice', () => {
  const ALL = ['pausing', 'stopping', 'stopped', 'paused', 'failed'];

  it('says plainly that JupyterLab loses its server, and how to come back', () => {
    for (const ended of [release({ state: 'stopped' }), lostRelease(release())]) {
      const notice = releaseNotice(ended);
      expect(notice.type).toBe('success');
      expect(notice.final).toBe(true);
      expect(notice.message).toContain('JupyterLab loses its connection now');
      expect(notice.message).toContain('start it again from the Hub');
    }
  });

  it('fits every message in a toast, and keeps the long reason for its Details', () => {
    for (const state of ALL) {
      const notice = releaseNotice(release({ state, detail: MISSING_SCOPE }));
      expect(notice.message.length).toBeLessThanOrEqual(NOTICE_LENGTH);
    }
    const paused = releaseNotice(release({ state: 'paused', detail: MISSING_SCOPE }));
    expect(paused).toMatchObject({ type: 'warning', final: true, details: MISSING_SCOPE });
    expect(releaseNotice(release({ state: 'failed' })).type).toBe('error');
    expect(releaseNotice(release())).toEqual({
      message: 'Pausing 2 sessions, then stopping the server…',
      type: 'in-progress',
      final: false,
      details: ''
    });
  });
});

describe('the warning of a release coming', () => {
  const warning = {
    reason: 'idle for 2.0 h',
    warned_at: 1000,
    release_at: 1300,
    idle_for: 7200,
    seconds_left: 300
  };

  it('counts down as a clock does', () => {
    expect(formatCountdown(299.2)).toBe('5:00');
    expect(formatCountdown(299)).toBe('4:59');
    expect(formatCountdown(61)).toBe('1:01');
    expect(formatCountdown(9)).toBe('0:09');
    expect(formatCountdown(3723)).toBe('1:02:03');
    expect(formatCountdown(-4)).toBe('0:00');
  });

  it('says when, why, and that nothing is lost', () => {
    expect(warningMessage(warning, 299)).toBe(
      'This server will be paused in 4:59 (idle for 2.0 h). ' +
        'Your notebooks are saved and come back with Resume.'
    );
    expect(warningMessage(warning, 0)).toBe(
      'This server is being paused now (idle for 2.0 h). ' +
        'Your notebooks are saved and come back with Resume.'
    );
    expect(warningMessage({ ...warning, reason: '' }, 30)).toBe(
      'This server will be paused in 0:30. Your notebooks are saved and come back with Resume.'
    );
  });
});
