import { LabIcon, pauseIcon as corePauseIcon } from '@jupyterlab/ui-components';

/**
 * The Pause button's icon: two bars.
 */
export const pauseIcon = corePauseIcon;

const resumeSvg = `<svg xmlns="http://www.w3.org/2000/svg" width="16" height="16" viewBox="0 0 24 24">
  <g class="jp-icon3" fill="#616161">
    <rect x="4" y="5" width="3" height="14" rx="1"/>
    <path d="M10 5.5v13a1 1 0 0 0 1.5.86l10-6.5a1 1 0 0 0 0-1.72l-10-6.5A1 1 0 0 0 10 5.5z"/>
  </g>
</svg>`;

/**
 * The Resume button's icon: a bar and a play triangle (not the Run button's triangle alone).
 */
export const resumeIcon = new LabIcon({
  name: 'jupyter-pause:resume',
  svgstr: resumeSvg
});

const sessionsSvg = `<svg xmlns="http://www.w3.org/2000/svg" width="16" height="16" viewBox="0 0 24 24">
  <g class="jp-icon3" fill="#616161">
    <path d="M12 2a10 10 0 1 0 0 20 10 10 0 0 0 0-20zm0 2a8 8 0 1 1 0 16 8 8 0 0 1 0-16z"/>
    <rect x="8.5" y="7.5" width="2.5" height="9" rx="0.8"/>
    <rect x="13" y="7.5" width="2.5" height="9" rx="0.8"/>
  </g>
</svg>`;

/**
 * The "Paused sessions" sidebar's icon: a pause sign in a circle.
 */
export const pausedSessionsIcon = new LabIcon({
  name: 'jupyter-pause:sessions',
  svgstr: sessionsSvg
});
