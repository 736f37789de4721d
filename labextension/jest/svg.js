/** Stands in for an imported SVG file: JupyterLab's icons need a non-empty SVG string. */
module.exports = '<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 16 16"></svg>';
