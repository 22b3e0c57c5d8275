#!/usr/bin/env bash
# Set up cwm-nb on a fresh machine: the sandbox tool (bubblewrap), a virtual environment at .venv, the project
# installed into it in editable mode, and a Jupyter kernel named `cwm-nb` that runs .venv's interpreter.
# `--dev` adds the test, notebook and docs tools (nbdev, pytest, torch, Sphinx with MyST-NB, Playwright), the optional
# household extra (AlfWorld: textworld[pddl], alfworld; its two sdists built once and cached) and,
# as root, Debian's Chromium for the docs site's browser test and Debian's SLURM (slurmctld, slurmd, munge) for the
# SLURM tests. Safe to run again: it only installs what is missing.
set -euo pipefail
cd "$(dirname "$0")/.."
dev=""; extras=""
[ "${1:-}" = "--dev" ] && dev=1 && extras="[dev]"

apt_updated=""
apt_install() {   # apt_install PACKAGE WHY HINT: install a Debian package as root, else warn with HINT
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "setup: installing $1 ($2)" >&2
    [ -n "$apt_updated" ] || { apt-get update -qq; apt_updated=1; }
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$1" >/dev/null
  else
    echo "setup: warning: $1 is missing; $3" >&2
    echo "       Install it with your package manager (e.g. 'sudo apt-get install $1')." >&2
  fi
}

command -v bwrap >/dev/null 2>&1 ||
  apt_install bubblewrap "kernel isolation for LLM-written code" "generated code will run under Landlock and seccomp where the kernel has them (CWM_NB_ISOLATION=auto), else cwm-nb refuses to run it."
if [ -n "$dev" ] && ! command -v chromium >/dev/null 2>&1; then
  apt_install chromium "headless browser for the docs site's test" "the browser tests of tests/test_docs.py will be skipped." ||
    echo "setup: warning: installing chromium failed; the browser tests of tests/test_docs.py will be skipped." >&2
fi

# A one-node SLURM that tests/test_slurm.py starts itself (its daemons run as root): Debian's slurmctld, slurmd and munge.
if [ -n "$dev" ]; then
  for pair in slurmctld:slurmctld slurmd:slurmd munge:munged; do
    pkg=${pair%%:*}; prog=${pair#*:}
    command -v "$prog" >/dev/null 2>&1 || [ -x "/usr/sbin/$prog" ] ||
      apt_install "$pkg" "a one-node SLURM for the sweep tests" "the SLURM tests of tests/test_slurm.py will be skipped." ||
      echo "setup: warning: installing $pkg failed; the SLURM tests of tests/test_slurm.py will be skipped." >&2
  done
fi

# The compiled MCTS loop (setup.py) needs the Python headers; Debian's python3 has them in python3-dev.
[ -f "$(python3 -c 'import sysconfig; print(sysconfig.get_paths()["include"])')/Python.h" ] ||
  { apt_install python3-dev "headers for the compiled MCTS loop" "planning will use the generic (slower) search." ||
    echo "setup: warning: installing python3-dev failed; planning will use the generic (slower) search." >&2; }

[ -x .venv/bin/python ] || python3 -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
# llama-cpp-python, built from source for this CPU (about 5 minutes on 2 cores; its vector extensions on, llama.cpp's
# AMX path off) into ~/.cache/cwm-nb/llama-wheels, keyed by version and flags; your CMAKE_ARGS come last and win.
.venv/bin/python tools/llama_build.py install --venv .venv
# The optional household extra (AlfWorld, 36_alfworld) with --dev: two of its dependencies are sdists built here
# (fast-downward-textworld about 80 s on 2 cores, jericho a few seconds), kept as wheels in
# ~/.cache/cwm-nb/household-wheels/<python>-<machine>/ (under $CWM_NB_CACHE if set) so another clone reuses them.
# If they cannot build, everything else is installed and the AlfWorld commands say how to get the extra.
find_links=()
if [ -n "$dev" ]; then
  hw="${CWM_NB_CACHE:-$HOME/.cache/cwm-nb}/household-wheels/$(.venv/bin/python -c 'import sys, platform; print(f"cp{sys.version_info[0]}{sys.version_info[1]}-{platform.machine()}")')"
  if ! ls "$hw"/jericho-3.3.1-*.whl "$hw"/fast_downward_textworld-20.6.4-*.whl >/dev/null 2>&1; then
    echo "setup: building the household extra's sdists (jericho, fast-downward-textworld; about 1.5 minutes on 2 cores)" >&2
    t0=$SECONDS; mkdir -p "$hw"; tmp="$(mktemp -d "$hw/.build-XXXXXX")"
    # fast-downward-textworld's build runs `python build.py`: .venv's python first on PATH (a pyenv shim there
    # starts an interpreter without its standard library inside pip's build environment)
    if PATH="$PWD/.venv/bin:$PATH" .venv/bin/python -m pip wheel -q --no-deps --no-cache-dir -w "$tmp" \
         jericho==3.3.1 fast-downward-textworld==20.6.4; then
      mv "$tmp"/*.whl "$hw"/ && echo "setup: built in $((SECONDS - t0)) s, cached in $hw" >&2
    else
      echo "setup: warning: the household extra did not build; AlfWorld is left out (the rest works)." >&2
    fi
    rm -rf "$tmp"
  fi
  if ls "$hw"/jericho-3.3.1-*.whl "$hw"/fast_downward_textworld-20.6.4-*.whl >/dev/null 2>&1; then
    extras="[dev,household]"; find_links=(--find-links "$hw")
  fi
fi
.venv/bin/python -m pip install -q "${find_links[@]}" -e ".${extras}"
# JupyterLab (`.venv/bin/jupyter lab`) offers this kernel: .venv's interpreter, so this checkout's cwm_nb.
.venv/bin/python -m ipykernel install --sys-prefix --name cwm-nb --display-name "cwm-nb (.venv)" >/dev/null
if .venv/bin/python -c "import sys; from cwm_nb.bench.fast_mcts import compiled_search; sys.exit(compiled_search() is None)" 2>/dev/null; then
  echo "setup: the compiled MCTS loop is built (cwm_nb.bench._fast_mcts)" >&2
else
  echo "setup: warning: the compiled MCTS loop did not build; planning uses the generic search (slower, same results)" >&2
fi
# One token from the embedded model, in a child process: a build this CPU cannot run fails here, saying what to do.
.venv/bin/python tools/llama_build.py check --venv .venv || exit 1
echo "setup: done (.venv)" >&2
