# Two commands a person needs: `make lab` and `make test`. Everything else is set up on the way.
# While working: `make test-fast` (no kernels, servers, S3 or browser) and `make lint`.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
RUFF := $(VENV)/bin/ruff
PIP := $(PY) -m pip --disable-pip-version-check
# The CPU build of torch; a newer release would pull several GB of CUDA wheels. pip installs it
# (where pip is configured to find it), then uv (from PyPI) everything else, holding torch to it:
# uv downloads and unpacks in parallel (seconds where pip takes minutes). uv reads no pip
# configuration: a package mirror is UV_DEFAULT_INDEX.
TORCH_SPEC ?= torch==2.13.0
# rfc3987-syntax (jsonschema's checker of the `iri` format, which no schema a Jupyter server or
# JupyterHub validates uses) compiles its grammar on import: 1.1 s of every Jupyter server's start.
# The venvs go without it, as docs/jupyterhub.md suggests for a Hub's user image.
# $(call uv_install,PYTHON): uv installing into the venv of PYTHON, torch held to TORCH_SPEC.
uv_install = $(VENV)/bin/uv pip install -q --python $(1) --constraint $(VENV)/torch.txt --override $(VENV)/overrides.txt
# Every process the tests start may cache the bytecode of what it imports (in the venvs and the
# tree), even where the shell sets PYTHONDONTWRITEBYTECODE: without the cache each kernel, server
# and test process compiles torch, Jupyter and the corpus's libraries from source again (importing
# torch, ipykernel and jupyter_pause: 4.1 CPU-s from source, 1.9 from the cache).
unexport PYTHONDONTWRITEBYTECODE
# What `make lab` needs (the package, JupyterLab, the front end), then what `make test` adds.
LAB_STAMP := $(VENV)/.lab
STAMP := $(VENV)/.installed
DOCS_STAMP := $(VENV)/.docs
# JupyterHub's proxy, for the Hub tests: installed beside the venv, found there by tests/support/hub.py.
PROXY_VERSION ?= 5
# Azurite, the Azure Blob emulator of the Azure store tests: installed beside the venv, found there by tests/support/emulators.py.
AZURITE_VERSION ?= 3
# The JupyterLab front end: `pip install -e` builds it (npm) when any of these is newer.
LABEXT_SRC := $(wildcard labextension/package.json labextension/package-lock.json \
	labextension/src/*.ts labextension/src/*.json labextension/schema/*.json labextension/style/*)

.PHONY: lab lint test test-fast test-js test-collect docs bench bench-models bench-hub clean

# $(call beside_npm,NPM,LOG,WHAT,COMMAND): COMMAND runs while the npm commands NPM install WHAT in
# the background, their output in LOG (shown if they fail). Either failing fails the recipe, and
# npm is waited for either way (never left running, or killed half-way).
NPM_INSTALL := npm install -s --no-audit --no-fund
beside_npm = ( $(1) ) > $(2) 2>&1 & npm=$$!; \
	$(4) || { wait $$npm; exit 1; }; \
	wait $$npm || { cat $(2); echo "npm could not install $(3) (above)" >&2; exit 1; }

# The front end's npm packages download while torch installs; the editable install then builds the
# front end with them. pip writes no bytecode (--no-compile): the first process to import a module
# writes it (see PYTHONDONTWRITEBYTECODE above): torch installs in 14 s, not 26 s compiling too.
$(LAB_STAMP): pyproject.toml Makefile $(LABEXT_SRC)
	$(PYTHON) -m venv $(VENV)
	$(call beside_npm,cd labextension && $(NPM_INSTALL),\
		$(VENV)/npm-lab.log,the front end's packages,$(PIP) install -q --no-compile "$(TORCH_SPEC)" uv)
	echo "$(TORCH_SPEC)" > $(VENV)/torch.txt
	echo 'rfc3987-syntax ; python_version < "3"' > $(VENV)/overrides.txt
	$(call uv_install,$(PY)) -e .
	touch $(LAB_STAMP)

# The test extras: emulators, a Hub, the libraries of the fidelity corpus (the fine-tuning stack's among
# them), jupyter-collaboration, the docs' tools. npm installs the proxy and Azurite meanwhile. (A
# variable: the comma between the extras would split the arguments of $(call).)
TEST_EXTRAS := .[test,test-finetune,test-collab]

$(STAMP): $(LAB_STAMP)
	$(call beside_npm,$(NPM_INSTALL) --prefix $(VENV)/proxy configurable-http-proxy@$(PROXY_VERSION) && \
		$(NPM_INSTALL) --prefix $(VENV)/azurite azurite@$(AZURITE_VERSION),\
		$(VENV)/npm.log,the proxy or Azurite,$(call uv_install,$(PY)) -e "$(TEST_EXTRAS)")
	touch $(STAMP)

# The older image of tests/proof/test_upgrade.py: the releases a session is checkpointed with before the
# notebook image was upgraded. Only these and what they need are installed here (uv does not look
# through the .pth file below, so their dependencies land here too); everything else (jupyter_pause,
# torch, dill ...) comes from the project venv, whose site-packages that .pth file adds after this
# venv's own, so the older releases come first. uv installs them: the venv needs no pip of its own.
OLD_VENV ?= .venv-old
OLD_SPEC ?= scikit-learn==1.7.2 pandas==2.3.3 numpy==2.3.5
OLD_STAMP := $(OLD_VENV)/.installed

$(OLD_STAMP): $(STAMP)
	rm -rf $(OLD_VENV)
	$(PY) -m venv --without-pip $(OLD_VENV)
	$(OLD_VENV)/bin/python -c "import site, sys, sysconfig; \
		open(sysconfig.get_paths()['purelib'] + '/project-venv.pth', 'w').write('import site; site.addsitedir(%r)\n' % sys.argv[1])" \
		"$$($(PY) -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
	$(call uv_install,$(OLD_VENV)/bin/python) $(OLD_SPEC)
	$(OLD_VENV)/bin/python -c "import sklearn, pandas, numpy, jupyter_pause, torch; \
		print('$(OLD_VENV):', 'scikit-learn', sklearn.__version__, 'pandas', pandas.__version__, 'numpy', numpy.__version__)"
	touch $(OLD_STAMP)

# The browser test drives Debian's chromium (Playwright cannot download a browser here).
BROWSER := /usr/bin/chromium

$(BROWSER):
	@if [ "$$(id -u)" = 0 ]; then apt-get update -qq && apt-get install -y -qq --no-install-recommends chromium; \
	else echo "the browser test needs Debian's chromium: run 'sudo apt-get install chromium'" >&2; exit 1; fi

# Test processes for `make test`, each taking whole test files (their servers and Hubs are
# shared by a file's tests): one per CPU core and two more, since a test also waits, on a kernel,
# a server or a Hub to start or on a timeout it tests (measured on two cores: pytest took 12:05
# with four where it took 12:52-13:02 with three).
# TEST_WORKERS=0 runs them in this process.
TEST_WORKERS ?= $(shell n=$$(nproc 2>/dev/null) && echo $$((n + 2)) || echo auto)

# Two jobs at a time, each one's output kept together: the browser (apt) installs and the front
# end's unit tests run beside the venvs' installs (uv, mostly downloads), then the lint and format
# check and the tests' collection. Then every Python test (the slowest twelve, then the summary,
# are the last thing printed).
test:
	$(MAKE) --no-print-directory -j2 -Otarget lint $(BROWSER) $(OLD_STAMP) test-js test-collect
	$(PY) -m pytest -p no:cacheprovider -q -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder --durations=12

# The Python tests that start no kernel, Jupyter server, S3 server, browser or heavy subprocess,
# one test process per CPU core (more are no faster: these tests compute, they do not wait).
test-fast: $(STAMP)
	$(PY) -m pytest -p no:cacheprovider -q -m "not integration" -n logical --dist loadfile

# The tests collected once before the test processes start: the bytecode of what they import and
# pytest's rewritten test modules are written once, not by every test process at once.
test-collect: $(STAMP)
	$(PY) -m pytest -p no:cacheprovider -q --collect-only > $(VENV)/collect.log || { cat $(VENV)/collect.log; exit 1; }

# ruff's rules and format style are configured in pyproject.toml.
lint: $(STAMP)
	$(RUFF) check .
	$(RUFF) format --check .

# Unit tests of the front end (jest); node_modules comes with the front end's build.
test-js: $(LAB_STAMP)
	cd labextension && npm test --silent

# JupyterLab refuses to run as root unless told; a container shell often is root.
ROOT_FLAG := $(if $(filter 0,$(shell id -u)),--allow-root)

lab: $(LAB_STAMP)
	$(VENV)/bin/jupyter lab --notebook-dir=notebooks $(ROOT_FLAG)

# The documentation site (Sphinx, MyST Markdown), warnings as errors.
$(DOCS_STAMP): $(LAB_STAMP)
	$(call uv_install,$(PY)) -e ".[docs]"
	touch $(DOCS_STAMP)

docs: $(DOCS_STAMP)
	$(PY) -m sphinx -W --keep-going -q -b html docs docs/_build/html
	@echo "built docs/_build/html/index.html"

# The speed targets, each measured side by side with its baseline: the checkpoint and resume
# cases (run.py; case 8 resumes on a new node, from a local folder and from S3), the training
# loops' safe points, the GPU-hours report of 100 users' month, and 20 users of one Hub and one S3
# store resuming at once (bench-hub runs that one alone, with USERS users).
bench: $(STAMP)
	$(PY) benchmarks/run.py
	$(PY) benchmarks/loops.py
	$(PY) benchmarks/ledger.py --users 100 --direct
	$(PY) benchmarks/hub_storm.py --users 20

# Model files: a LoRA-style session on a base model of MB megabytes, on a local folder and S3.
MB ?= 2048
bench-models: $(STAMP)
	$(PY) benchmarks/models.py --mb $(MB)

# The 9:00 storm: USERS users of one JupyterHub and one S3 store release and resume at once.
USERS ?= 6
bench-hub: $(STAMP)
	$(PY) benchmarks/hub_storm.py --users $(USERS)

clean:
	rm -rf $(VENV) $(OLD_VENV) build dist *.egg-info
	rm -rf jupyter_pause/labextension labextension/lib labextension/node_modules labextension/tsconfig.tsbuildinfo
	rm -rf docs/_build
