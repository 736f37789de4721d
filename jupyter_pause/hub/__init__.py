"""The pause-instead-of-cull JupyterHub service (``jupyter-pause-hub``): it runs beside the Hub,
never inside a user's server; neither the server extension nor the engine imports it."""
