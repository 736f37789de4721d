import {
  ILayoutRestorer,
  JupyterFrontEnd,
  JupyterFrontEndPlugin
} from '@jupyterlab/application';
import { ICommandPalette, IToolbarWidgetRegistry } from '@jupyterlab/apputils';
import { PageConfig, URLExt } from '@jupyterlab/coreutils';
import { IDocumentManager } from '@jupyterlab/docmanager';
import { INotebookTracker, NotebookPanel } from '@jupyterlab/notebook';
import { refreshIcon } from '@jupyterlab/ui-components';
import { ReadonlyPartialJSONObject } from '@lumino/coreutils';

import { NotebookPauseController } from './controller';
import { errorMessage, PauseAPI, showError } from './handler';
import { pauseIcon, pausedSessionsIcon, resumeIcon } from './icons';
import { addReleaseCommand, ReleaseNotifier, runRelease } from './releasedialog';
import { IServerStatusModel, ServerStatusModel } from './servermodel';
import { PausedSessionsPanel } from './sessions';
import { PauseStatusView } from './statusview';
import {
  createToolbarButton,
  PAUSE_TEXT,
  RESUME_IN_KERNEL_TEXT,
  RESUME_TEXT
} from './toolbar';
import { ReleaseWarningNotifier } from './warning';

/**
 * The command ids.
 */
export namespace CommandIDs {
  export const pause = 'jupyter-pause:pause';
  export const resume = 'jupyter-pause:resume';
  export const resumeInKernel = 'jupyter-pause:resume-in-kernel';
  export const openSessions = 'jupyter-pause:open-sessions';
  export const refreshSessions = 'jupyter-pause:refresh-sessions';
  export const release = 'jupyter-pause:release';
}

/**
 * Names of the notebook toolbar items (schema/plugin.json, `jupyter.lab.toolbars`).
 */
export namespace ToolbarItems {
  export const pause = 'jupyter-pause-pause';
  export const resume = 'jupyter-pause-resume';
  export const status = 'jupyter-pause-status';
}

const PALETTE_CATEGORY = 'Pause';

/**
 * The server's own pause status, polled once for the whole page.
 */
const serverPlugin: JupyterFrontEndPlugin<ServerStatusModel> = {
  id: 'jupyter-pause:server',
  description: "Polls the server's pause status: Hub, resume_on_open, release progress.",
  autoStart: true,
  provides: IServerStatusModel,
  activate: (): ServerStatusModel =>
    new ServerStatusModel({
      fetch: PauseAPI.serverStatus,
      page: {
        hubUser: PageConfig.getOption('hubUser'),
        hubPrefix: PageConfig.getOption('hubPrefix')
      }
    })
};

/**
 * Pause and Resume for each notebook: commands, toolbar buttons, status indicator, and the
 * guard that keeps a paused notebook from starting a fresh kernel.
 */
const notebookPlugin: JupyterFrontEndPlugin<void> = {
  id: 'jupyter-pause:plugin',
  description: 'Pause a notebook session (checkpoint and shut down its kernel) and resume it.',
  autoStart: true,
  requires: [INotebookTracker, IToolbarWidgetRegistry, IServerStatusModel],
  optional: [ICommandPalette],
  activate: (
    app: JupyterFrontEnd,
    tracker: INotebookTracker,
    toolbarRegistry: IToolbarWidgetRegistry,
    server: ServerStatusModel,
    palette: ICommandPalette | null
  ): void => {
    const { commands } = app;
    const controllers = new WeakMap<NotebookPanel, NotebookPauseController>();

    const controllerFor = (panel: NotebookPanel): NotebookPauseController => {
      let controller = controllers.get(panel);
      if (!controller || controller.isDisposed) {
        controller = new NotebookPauseController({
          panel,
          sessions: app.serviceManager.sessions,
          kernelspecs: app.serviceManager.kernelspecs,
          onResumeRequested: c =>
            void commands.execute(CommandIDs.resume, { panelId: c.panel.id }),
          onPollError: message => {
            // A release shuts the server down: the notification that follows it says so.
            if (!server.stopping && !server.releasing) {
              Private.notifyOnce(message);
            }
          },
          resumeOnOpen: async () => {
            await server.ready;
            return server.resumeOnOpen;
          }
        });
        controller.changed.connect(() => {
          commands.notifyCommandChanged(CommandIDs.pause);
          commands.notifyCommandChanged(CommandIDs.resume);
          commands.notifyCommandChanged(CommandIDs.resumeInKernel);
        });
        controllers.set(panel, controller);
      }
      return controller;
    };

    // Toolbar buttons act on the notebook whose toolbar they sit in (args.panelId); from the
    // palette and the context menu, on the current notebook.
    const panelFor = (args: ReadonlyPartialJSONObject): NotebookPanel | null => {
      const id = args['panelId'];
      if (typeof id === 'string' && id) {
        return tracker.find(panel => panel.id === id) ?? null;
      }
      return tracker.currentWidget;
    };

    commands.addCommand(CommandIDs.pause, {
      label: PAUSE_TEXT.label,
      caption: PAUSE_TEXT.caption,
      icon: args => (args['isPalette'] ? undefined : pauseIcon),
      isEnabled: args => {
        const panel = panelFor(args);
        return !!panel && controllerFor(panel).canPause;
      },
      execute: async args => {
        const panel = panelFor(args);
        if (panel) {
          await controllerFor(panel).pause();
        }
      }
    });

    commands.addCommand(CommandIDs.resume, {
      label: RESUME_TEXT.label,
      caption: RESUME_TEXT.caption,
      icon: args => (args['isPalette'] ? undefined : resumeIcon),
      isEnabled: args => {
        const panel = panelFor(args);
        return !!panel && controllerFor(panel).canResume;
      },
      execute: async args => {
        const panel = panelFor(args);
        if (panel) {
          await controllerFor(panel).resume();
        }
      }
    });

    // Resume, asking first which kernelspec to start (Resume asks only when the notebook's is missing).
    commands.addCommand(CommandIDs.resumeInKernel, {
      label: RESUME_IN_KERNEL_TEXT.label,
      caption: RESUME_IN_KERNEL_TEXT.caption,
      isEnabled: args => {
        const panel = panelFor(args);
        return !!panel && controllerFor(panel).canResume;
      },
      execute: async args => {
        const panel = panelFor(args);
        if (panel) {
          await controllerFor(panel).resume({ pickKernel: true });
        }
      }
    });

    const button = (id: string) => (panel: NotebookPanel) =>
      createToolbarButton(commands, id, panel.id);
    toolbarRegistry.addFactory<NotebookPanel>(
      'Notebook',
      ToolbarItems.pause,
      button(CommandIDs.pause)
    );
    toolbarRegistry.addFactory<NotebookPanel>(
      'Notebook',
      ToolbarItems.resume,
      button(CommandIDs.resume)
    );
    toolbarRegistry.addFactory<NotebookPanel>(
      'Notebook',
      ToolbarItems.status,
      panel => new PauseStatusView(controllerFor(panel).model, server)
    );

    // Every notebook gets a controller, even with the status item removed from its toolbar:
    // the guard against starting a fresh kernel in a paused session lives there.
    tracker.widgetAdded.connect((_, panel) => {
      controllerFor(panel);
      commands.notifyCommandChanged(CommandIDs.pause);
      commands.notifyCommandChanged(CommandIDs.resume);
      commands.notifyCommandChanged(CommandIDs.resumeInKernel);
    });
    tracker.forEach(panel => controllerFor(panel));
    tracker.currentChanged.connect(() => {
      commands.notifyCommandChanged(CommandIDs.pause);
      commands.notifyCommandChanged(CommandIDs.resume);
      commands.notifyCommandChanged(CommandIDs.resumeInKernel);
    });

    if (palette) {
      palette.addItem({ command: CommandIDs.pause, category: PALETTE_CATEGORY });
      palette.addItem({ command: CommandIDs.resume, category: PALETTE_CATEGORY });
      palette.addItem({ command: CommandIDs.resumeInKernel, category: PALETTE_CATEGORY });
    }
  }
};

/**
 * The "Paused sessions" sidebar.
 */
const sessionsPlugin: JupyterFrontEndPlugin<void> = {
  id: 'jupyter-pause:sessions',
  description: 'Lists the sessions in the pause store; pulls and resumes them here.',
  autoStart: true,
  requires: [IDocumentManager, IServerStatusModel],
  optional: [ILayoutRestorer, ICommandPalette],
  activate: (
    app: JupyterFrontEnd,
    docManager: IDocumentManager,
    server: ServerStatusModel,
    restorer: ILayoutRestorer | null,
    palette: ICommandPalette | null
  ): void => {
    const panel = new PausedSessionsPanel({ docManager, server });
    app.shell.add(panel, 'left', { rank: 900, type: 'Paused sessions' });
    if (restorer) {
      restorer.add(panel, panel.id);
    }

    app.commands.addCommand(CommandIDs.openSessions, {
      label: 'Show Paused Sessions',
      caption: 'Show the sessions in the pause store',
      icon: args => (args['isPalette'] ? undefined : pausedSessionsIcon),
      execute: () => {
        app.shell.activateById(panel.id);
      }
    });
    app.commands.addCommand(CommandIDs.refreshSessions, {
      label: 'Refresh Paused Sessions',
      caption: 'Ask the server for the sessions in the pause store again',
      icon: args => (args['isPalette'] ? undefined : refreshIcon),
      execute: () => panel.refresh()
    });
    if (palette) {
      palette.addItem({ command: CommandIDs.openSessions, category: PALETTE_CATEGORY });
      palette.addItem({ command: CommandIDs.refreshSessions, category: PALETTE_CATEGORY });
    }
  }
};

/**
 * "Pause all and stop server" (File menu, palette), shown only under a JupyterHub, the
 * notification that follows a release, and the one that warns of a release coming.
 */
const releasePlugin: JupyterFrontEndPlugin<void> = {
  id: 'jupyter-pause:release',
  description: 'Pause every notebook session, then stop this server so its GPU goes back.',
  autoStart: true,
  requires: [INotebookTracker, IServerStatusModel],
  optional: [ICommandPalette],
  activate: (
    app: JupyterFrontEnd,
    tracker: INotebookTracker,
    server: ServerStatusModel,
    palette: ICommandPalette | null
  ): void => {
    addReleaseCommand(app.commands, CommandIDs.release, {
      server,
      saveAll: () => Private.saveNotebooks(tracker)
    });
    const hubPrefix = PageConfig.getOption('hubPrefix');
    new ReleaseNotifier(
      server,
      hubPrefix ? URLExt.join(PageConfig.getOption('hubHost'), hubPrefix, 'home') : null
    );
    // The pause service's warning before it releases this server: a countdown, Keep working
    // and Pause now (the release above, without asking again: the user just chose it).
    new ReleaseWarningNotifier({
      server,
      pauseNow: async () => {
        await runRelease({
          server,
          saveAll: () => Private.saveNotebooks(tracker),
          confirm: async () => true
        });
      }
    });
    if (palette) {
      palette.addItem({ command: CommandIDs.release, category: PALETTE_CATEGORY });
    }
  }
};

namespace Private {
  /**
   * Save every open notebook with unsaved changes; fails naming the first that could not be.
   */
  export async function saveNotebooks(tracker: INotebookTracker): Promise<void> {
    const panels: NotebookPanel[] = [];
    tracker.forEach(panel => {
      if (panel.context.model.dirty && !panel.context.model.readOnly) {
        panels.push(panel);
      }
    });
    for (const panel of panels) {
      try {
        await panel.context.save();
      } catch (error) {
        throw new Error(`${panel.context.path}: ${errorMessage(error)}`);
      }
    }
  }

  const recent = new Map<string, number>();

  /**
   * Show a polling error once a minute at most, however many notebooks poll.
   */
  export function notifyOnce(message: string): void {
    const now = Date.now();
    const last = recent.get(message);
    if (last !== undefined && now - last < 60000) {
      return;
    }
    recent.set(message, now);
    showError(`jupyter-pause status: ${message}`, 10000);
  }
}

export default [serverPlugin, notebookPlugin, sessionsPlugin, releasePlugin];
