/** Answers of the server, as the contract of issue 13 writes them, for the specs. */
import { IRelease, IServerStatus } from '../release';

/** A release of two sessions, both being checkpointed. */
export function release(fields: Partial<IRelease> = {}): IRelease {
  return {
    id: '20261130-161500-abc123',
    state: 'pausing',
    server_stop: null,
    detail: '',
    trigger: 'button',
    started: 1764519300,
    updated: 1764519300,
    sessions: [
      { path: 'a.ipynb', session: 'a', state: 'checkpointing', detail: '', checkpoint: null },
      { path: 'b.ipynb', session: 'b', state: 'checkpointing', detail: '', checkpoint: null }
    ],
    ...fields
  };
}

/** The server's status under a Hub, nothing running. */
export function serverStatus(fields: Partial<IServerStatus> = {}): IServerStatus {
  return {
    node: 'gpu-07',
    store: 'file:///store',
    lease: 'create-if-absent',
    hub: { user: 'alice', server_name: '' },
    resume_on_open: false,
    sessions: [],
    release: null,
    ...fields
  };
}

