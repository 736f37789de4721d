import { Notification } from '@jupyterlab/apputils';
import { URLExt } from '@jupyterlab/coreutils';
import { ServerConnection } from '@jupyterlab/services';

import { IRelease, IReleaseWarning, IServerStatus } from './release';
import {
  IPauseStatus,
  IPullReply,
  ISessionsReply
} from './status';
import vocabulary from './vocabulary.json';

/**
 * Call the jupyter-pause REST API: `<baseUrl>/jupyter-pause/api/<endPoint>`.
 *
 * @param endPoint API endpoint, e.g. `pause` or `status?path=nb.ipynb`
 * @param init Initial values for the request
 * @returns The response body, parsed as JSON
 * @throws ServerConnection.ResponseError carrying the server's JSON "message" on non-2xx;
 *   ServerConnection.NetworkError when the server cannot be reached
 */
export async function requestAPI<T>(
  endPoint = '',
  init: RequestInit = {}
): Promise<T> {
  const settings = ServerConnection.makeSettings();
  const [route, query] = Private.splitQuery(endPoint);
  const requestUrl =
    URLExt.join(settings.baseUrl, 'jupyter-pause', 'api', route) + query;

  let response: Response;
  try {
    response = await ServerConnection.makeRequest(requestUrl, init, settings);
  } catch (error) {
    throw new ServerConnection.NetworkError(error as TypeError);
  }

  let data: any = await response.text();
  if (data.length > 0) {
    try {
      data = JSON.parse(data);
    } catch {
      // Not JSON (a proxy's error page): keep the text.
    }
  }

  if (!response.ok) {
    const message =
      (data && typeof data === 'object' && (data.message || data.reason)) ||
      (typeof data === 'string' && data.trim()) ||
      `${response.status} ${response.statusText}`.trim();
    throw new ServerConnection.ResponseError(
      response,
      message,
      data && typeof data === 'object' ? data.traceback ?? '' : ''
    );
  }

  return data as T;
}

/**
 * The status code of a failed request, if it got an answer.
 */
export function errorStatus(error: unknown): number | null {
  return error instanceof ServerConnection.ResponseError
    ? error.response.status
    : null;
}

/**
 * A readable message for anything thrown.
 */
export function errorMessage(error: unknown): string {
  if (error instanceof Error) {
    return error.message;
  }
  return String(error);
}

/**
 * Show an error as a notification that pops up (JupyterLab's notifications are silent, only in
 * the notification center, unless given an `autoClose`); by default it stays until dismissed.
 */
export function showError(message: string, autoClose: number | false = false): string {
  return Notification.error(message, { autoClose });
}

function post<T>(endPoint: string, body: object): Promise<T> {
  return requestAPI<T>(endPoint, {
    method: 'POST',
    body: JSON.stringify(body)
  });
}

/**
 * The endpoints, typed.
 */
export namespace PauseAPI {
  export function pause(path: string): Promise<IPauseStatus> {
    return post<IPauseStatus>('pause', { path });
  }

  /**
   * Resume in the kernelspec the session ran on, or in `kernelName` when given.
   */
  export function resume(path: string, kernelName?: string): Promise<IPauseStatus> {
    return post<IPauseStatus>(
      'resume',
      kernelName === undefined ? { path } : { path, kernel_name: kernelName }
    );
  }

  export function status(path: string): Promise<IPauseStatus> {
    return requestAPI<IPauseStatus>(
      'status' + URLExt.objectToQueryString({ path })
    );
  }

  export function sessions(): Promise<ISessionsReply> {
    return requestAPI<ISessionsReply>('sessions');
  }

  export function pull(session: string, overwrite = false): Promise<IPullReply> {
    return post<IPullReply>('pull', { session, overwrite });
  }

  /**
   * The server's own status (no path): Hub, resume_on_open, sessions with a kernel, release.
   */
  export function serverStatus(): Promise<IServerStatus> {
    return requestAPI<IServerStatus>('status');
  }

  /**
   * Pause every notebook session, then ask the Hub to stop this server (answers at once, 202).
   */
  export function release(): Promise<IRelease> {
    return post<IRelease>('release', { trigger: vocabulary.Trigger.BUTTON });
  }

  /**
   * Keep working: end the pause service's warning (the server counts it as activity).
   */
  export function keepWorking(): Promise<{ cancelled: IReleaseWarning | null }> {
    return requestAPI<{ cancelled: IReleaseWarning | null }>('release/warning', {
      method: 'DELETE'
    });
  }
}

namespace Private {
  export function splitQuery(endPoint: string): [string, string] {
    const index = endPoint.indexOf('?');
    return index < 0
      ? [endPoint, '']
      : [endPoint.slice(0, index), endPoint.slice(index)];
  }
}
