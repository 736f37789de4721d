/**
 * Browser APIs that jsdom lacks and JupyterLab's widgets use on import or when attached.
 */
if (typeof globalThis.DragEvent === 'undefined') {
  globalThis.DragEvent = class DragEvent extends MouseEvent {};
}

if (typeof window.matchMedia !== 'function') {
  window.matchMedia = query => ({
    matches: false,
    media: query,
    onchange: null,
    addListener: () => undefined,
    removeListener: () => undefined,
    addEventListener: () => undefined,
    removeEventListener: () => undefined,
    dispatchEvent: () => false
  });
}

if (typeof globalThis.requestIdleCallback !== 'function') {
  globalThis.requestIdleCallback = callback =>
    setTimeout(() => callback({ didTimeout: false, timeRemaining: () => 0 }), 0);
  globalThis.cancelIdleCallback = handle => clearTimeout(handle);
}
