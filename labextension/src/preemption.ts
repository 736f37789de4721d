/**
 * What the server's preemption watcher says (`preemption` in `GET /jupyter-pause/api/status`),
 * and how the status indicator words it: a watcher that cannot read its cloud's notice, and a
 * last checkpoint slower than the notice's lead time, show on every notebook.
 *
 * Pure functions only (no JupyterLab imports), so they are unit-tested as they are.
 */
import vocabulary from './vocabulary.json';

/**
 * A watcher's states, as the server names them (generated from `jupyter_pause/vocabulary.py`).
 */
export const WatcherState = vocabulary.WatcherState;

/**
 * One cloud's watcher.
 */
export interface IPreemptionWatcher {
  /** aws | gce | azure; null while `preemption_notices = "auto"` is still searching */
  cloud: string | null;
  /** searching | watching | blind | noticed */
  state: string;
  /** Why it cannot read its notice (blind), or what each cloud's probe got (searching). */
  error: string;
  url?: string;
  /** Seconds between a notice and the machine going away. */
  lead_time?: number;
  polls?: number;
  noticed?: string | null;
  /** What went wrong reading an early warning (AWS's rebalance recommendation), if anything. */
  trouble?: string;
}

/**
 * Whether the slowest running session's newest checkpoint fits in the notice's lead time.
 */
export interface IPreemptionFit {
  cloud: string;
  lead_time: number;
  seconds: number;
  session: string;
  checkpoint: string;
  fits: boolean;
  /** "your last checkpoint took 95 s; a GCE notice gives 30 s: ..." */
  advice: string;
}

/**
 * The server's preemption watcher; null (or absent, from an older server) when it is off.
 */
export interface IPreemption {
  /** c.PauseServer.preemption_notices, or null when only the per-cloud URLs are set */
  notices: string | null;
  watchers: IPreemptionWatcher[];
  fit: IPreemptionFit | null;
}

function cloudName(cloud: string | null): string {
  return cloud ? cloud.toUpperCase() : 'cloud';
}

/**
 * What needs the user's attention: `blind` (a watcher cannot read its notice), `tight` (a
 * pause would not fit the notice), or null.
 */
export function preemptionAttention(
  preemption: IPreemption | null | undefined
): 'blind' | 'tight' | null {
  if (!preemption) {
    return null;
  }
  if (preemption.watchers.some(w => w.state === WatcherState.BLIND)) {
    return 'blind';
  }
  if (preemption.fit && !preemption.fit.fits) {
    return 'tight';
  }
  return null;
}

/**
 * The few words the indicator adds after the notebook's own state, or '' when all is well:
 * `AWS notice unreadable`, `pause exceeds the GCE notice`.
 */
export function formatPreemption(preemption: IPreemption | null | undefined): string {
  switch (preemptionAttention(preemption)) {
    case 'blind': {
      const blind = preemption!.watchers.filter(w => w.state === WatcherState.BLIND);
      return `${blind.map(w => cloudName(w.cloud)).join(', ')} notice unreadable`;
    }
    case 'tight':
      return `pause exceeds the ${cloudName(preemption!.fit!.cloud)} notice`;
    default:
      return '';
  }
}

/**
 * The tooltip's lines about the watcher: each cloud's state (and why, when blind), then whether
 * a pause fits. Empty when the watcher is off.
 */
export function describePreemption(preemption: IPreemption | null | undefined): string[] {
  if (!preemption) {
    return [];
  }
  const lines = preemption.watchers.map(w => {
    const name = `${cloudName(w.cloud)} preemption notice`;
    switch (w.state) {
      case WatcherState.BLIND:
        return `${name}: cannot be read, a preemption would go unseen: ${w.error}`;
      case WatcherState.SEARCHING:
        return (
          'preemption notices: no cloud metadata service answered yet' +
          (w.error ? ` (${w.error})` : '')
        );
      case WatcherState.NOTICED:
        return `${name}: ${w.noticed || 'noticed'}; every session paused`;
      default:
        return `${name}: watched` + (w.trouble ? ` (${w.trouble})` : '');
    }
  });
  if (preemption.fit) {
    lines.push(preemption.fit.advice);
  }
  return lines;
}
