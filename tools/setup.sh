#!/usr/bin/env bash
# Set up cwm-nb on a fresh machine: the sandbox tool (bubblewrap), a virtual environment at .venv, and the
# project installed into it in editable mode. `--dev` adds the test and notebook tools (nbdev, pytest, torch).
# Safe to run again: it only installs what is missing.
set -euo pipefail
cd "$(dirname "$0")/.."
extras=""
[ "${1:-}" = "--dev" ] && extras="[dev]"

if ! command -v bwrap >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "setup: installing bubblewrap (kernel isolation for LLM-written code)" >&2
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq bubblewrap >/dev/null
  else
    echo "setup: warning: bubblewrap (bwrap) is missing; generated code will run without kernel isolation." >&2
    echo "       Install it with your package manager (e.g. 'sudo apt-get install bubblewrap')." >&2
  fi
fi

[ -x .venv/bin/python ] || python3 -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
# llama-cpp-python builds from source (about 5 minutes on 2 cores); the multimodal part is not needed.
export CMAKE_ARGS="${CMAKE_ARGS:--DLLAVA_BUILD=OFF}"
.venv/bin/python -m pip install -q -e ".${extras}"
echo "setup: done (.venv)" >&2
