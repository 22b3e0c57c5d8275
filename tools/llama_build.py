#!/usr/bin/env python3
"""Build llama-cpp-python for this CPU, install it, and check that the embedded model runs (used by tools/setup.sh).

Standard library only: it runs before the project is installed.

    python tools/llama_build.py flags                  # the CMake arguments this machine gets, and why
    python tools/llama_build.py install --venv .venv   # build (or reuse) the wheel for those arguments, install it
    python tools/llama_build.py check --venv .venv     # a one-token completion of the embedded model, in a child process

Why: llama.cpp's default build (`GGML_NATIVE=ON`, `-march=native`) compiles in every extension the compiler finds on
the build machine, AMX included; its AMX matrix path dies with a general-protection fault at `ldtilecfg` on
virtualised Sapphire/Granite Rapids Xeons (llama.cpp issue #20824). So on x86-64 the build names each extension
itself: `-DGGML_NATIVE=OFF`, every `GGML_<EXT>` the CPU has (from /proc/cpuinfo) ON, the others and `GGML_AMX_*` OFF.
The option names are those of `vendor/llama.cpp/ggml/CMakeLists.txt` in the llama-cpp-python 0.3.36 sdist.

Your own `CMAKE_ARGS` are added after these, so any `-D` you give wins (CMake keeps the last value), e.g.
`CMAKE_ARGS="-DGGML_AVX512=OFF" bash tools/setup.sh` or `CMAKE_ARGS="-DGGML_CUDA=ON" bash tools/setup.sh`.

pip caches a built wheel by its source, not by `CMAKE_ARGS`, so a wheel of an earlier build would come back whatever
the flags say. This script builds with `--no-cache-dir` into `~/.cache/cwm-nb/llama-wheels/<version>-<key>/` (under
`$CWM_NB_CACHE` if set), the key a hash of the version, the CMake arguments and the machine, so that another clone on
this machine reuses it and another CPU's flags get their own; it installs that wheel and records what it installed in
`<venv>/cwm-nb-llama-build.json`; a re-run with the same key does nothing, other flags build (or reuse) their own wheel.
"""
import argparse, hashlib, json, os, platform, re, shlex, signal, subprocess, sys, tempfile, time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
WHEELS = Path(os.environ.get("CWM_NB_CACHE") or Path.home()/".cache"/"cwm-nb")/"llama-wheels"   # as cwm_nb.core.cache_dir
RECORD = "cwm-nb-llama-build.json"   # in the venv: what was installed, with which CMake arguments

#: x86 options of ggml (llama-cpp-python 0.3.36) -> the /proc/cpuinfo flags the instructions they enable need.
#: GGML_AVX512 compiles with -mavx512f -mavx512cd -mavx512vl -mavx512dq -mavx512bw (ggml/src/ggml-cpu/CMakeLists.txt).
X86_OPTIONS = {
    "GGML_SSE42": ("sse4_2",),
    "GGML_AVX": ("avx",),
    "GGML_AVX2": ("avx2",),
    "GGML_BMI2": ("bmi2",),
    "GGML_FMA": ("fma",),
    "GGML_F16C": ("f16c",),
    "GGML_AVX_VNNI": ("avx_vnni",),
    "GGML_AVX512": ("avx512f", "avx512cd", "avx512vl", "avx512dq", "avx512bw"),
    "GGML_AVX512_VBMI": ("avx512vbmi",),
    "GGML_AVX512_VNNI": ("avx512_vnni",),
    "GGML_AVX512_BF16": ("avx512_bf16",),
}
AMX_OPTIONS = ("GGML_AMX_TILE", "GGML_AMX_INT8", "GGML_AMX_BF16")   # always OFF (llama.cpp #20824)
BASE_ARGS = ["-DLLAVA_BUILD=OFF"]   # the multimodal part is not needed


def cpu_info(path: str = "/proc/cpuinfo") -> tuple[str, set[str]] | None:
    "(model name, flags) of the first CPU in `path`, or None where there is no such file (macOS)."
    try: text = Path(path).read_text(errors="replace")
    except OSError: return None
    model = re.search(r"^model name\s*:\s*(.*)$", text, re.M)
    flags = re.search(r"^flags\s*:\s*(.*)$", text, re.M)
    return (model.group(1).strip() if model else platform.processor() or "unknown CPU"), set(flags.group(1).split()) if flags else set()


def portable_args(flags: set[str] | None, machine: str) -> list[str]:
    """CMake arguments for a CPU with cpuinfo `flags` on `machine` (platform.machine()): on x86-64 every extension
    named, AMX off; elsewhere (ARM, or no flags known) llama.cpp's own default, which has no AMX path."""
    if machine.lower() not in ("x86_64", "amd64") or not flags: return list(BASE_ARGS)
    on = {opt: all(f in flags for f in need) for opt, need in X86_OPTIONS.items()}
    return [*BASE_ARGS, "-DGGML_NATIVE=OFF", *(f"-D{o}={'ON' if v else 'OFF'}" for o, v in on.items()),
            *(f"-D{o}=OFF" for o in AMX_OPTIONS)]


def build_args(user: str | None = None) -> list[str]:
    "This machine's arguments, then the user's `CMAKE_ARGS` (`user`; default: the environment's), which win."
    info = cpu_info()
    user = os.environ.get("CMAKE_ARGS", "") if user is None else user
    return portable_args(info[1] if info else None, platform.machine()) + shlex.split(user)


def pinned_version(pyproject: Path = ROOT/"pyproject.toml") -> str:
    "The llama-cpp-python version pinned in pyproject.toml (`==X.Y.Z`)."
    m = re.search(r'"llama-cpp-python(?:\[[^\]]*\])?==([^"]+)"', pyproject.read_text())
    if not m: sys.exit("llama_build: pyproject.toml pins no llama-cpp-python==VERSION")
    return m.group(1)


def wheel_key(version: str, args: list[str]) -> str:
    "Folder name of the wheel built from `version` with `args` on this kind of machine."
    h = hashlib.sha256(json.dumps([version, args, platform.machine(), platform.system()]).encode()).hexdigest()
    return f"{version}-{h[:12]}"


def build_wheel(version: str, args: list[str], python: str = sys.executable, nice: bool = False) -> Path:
    "The wheel of llama-cpp-python `version` built with `args`: reused from `WHEELS`, else built (minutes)."
    folder = WHEELS/wheel_key(version, args)
    found = sorted(folder.glob("llama_cpp_python-*.whl"))
    if found: return found[0]
    WHEELS.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=WHEELS, prefix=".build-"))
    print(f"setup: building llama-cpp-python {version} from source (about 5 minutes on 2 cores) with\n"
          f"       CMAKE_ARGS={shlex.join(args)}", file=sys.stderr, flush=True)
    cmd = [python, "-m", "pip", "wheel", "-q", "--no-deps", "--no-cache-dir", "--no-binary", "llama-cpp-python",
           f"llama-cpp-python=={version}", "-w", str(tmp)]
    if nice: cmd = ["nice", "-n", "10", *cmd]
    r = subprocess.run(cmd, env=dict(os.environ, CMAKE_ARGS=shlex.join(args)))
    built = sorted(tmp.glob("llama_cpp_python-*.whl"))
    if r.returncode or not built:
        sys.exit(f"setup: error: building llama-cpp-python {version} failed (pip's output is above).\n"
                 "       What to do: install a C++ compiler and CMake (e.g. 'apt-get install build-essential cmake'); "
                 "if your CMAKE_ARGS name an option this CPU or compiler lacks, drop it; then run tools/setup.sh again.")
    (tmp/"cmake_args.txt").write_text(shlex.join(args) + "\n")
    try: tmp.rename(folder)   # atomic: a folder is there whole or not at all
    except OSError:           # another build finished first: use it
        if not folder.exists(): raise
    return sorted(folder.glob("llama_cpp_python-*.whl"))[0]


def installed_version(python: str) -> str | None:
    r = subprocess.run([python, "-c", "import importlib.metadata as m; print(m.version('llama-cpp-python'))"],
                       capture_output=True, text=True)
    return r.stdout.strip() if r.returncode == 0 else None


def install(venv: Path) -> dict:
    "Install the wheel for this machine's arguments into `venv` unless the record says it is there. Returns the record."
    python, version, args = str(venv/"bin"/"python"), pinned_version(), build_args()
    record_path, key = venv/RECORD, wheel_key(version, args)
    try: old = json.loads(record_path.read_text())
    except (OSError, ValueError): old = {}
    if old.get("key") == key and installed_version(python) == version:
        print(f"setup: llama-cpp-python {version} is installed, built with CMAKE_ARGS={shlex.join(args)}", file=sys.stderr)
        return old
    wheel = build_wheel(version, args, python)
    print(f"setup: installing {wheel}", file=sys.stderr, flush=True)
    subprocess.run([python, "-m", "pip", "install", "-q", "--no-deps", "--force-reinstall", "--no-cache-dir", str(wheel)],
                   check=True)
    info = cpu_info()
    record = dict(version=version, cmake_args=shlex.join(args), key=key, wheel=str(wheel),
                  cpu=info[0] if info else platform.processor(), machine=platform.machine())
    tmp = record_path.with_name(f".{RECORD}.tmp")
    tmp.write_text(json.dumps(record, indent=1) + "\n"); os.replace(tmp, record_path)
    return record


CHECK = """
from llama_cpp import Llama
from cwm_nb.llm.embedded import embedded_model_path
m = Llama(str(embedded_model_path()), n_ctx=256, n_threads=1, verbose=False)
out = m.create_completion("The capital of France is", max_tokens=1, temperature=0.0)
print("one token:", repr(out["choices"][0]["text"]))
"""

HINTS = {
    signal.SIGILL: "the build uses an instruction this CPU lacks (a wheel or venv built on another machine, or an "
                   "extension named in your CMAKE_ARGS): run tools/setup.sh on this machine; if it still fails, turn "
                   "the extension off, e.g. CMAKE_ARGS=\"-DGGML_AVX512=OFF\" bash tools/setup.sh",
    signal.SIGSEGV: "a crash inside llama.cpp. This build has AMX off; if your CMAKE_ARGS turn GGML_NATIVE or an "
                    "AMX option on, drop them. Else try fewer extensions: CMAKE_ARGS=\"-DGGML_AVX512=OFF "
                    "-DGGML_AVX512_VNNI=OFF -DGGML_AVX512_BF16=OFF -DGGML_AVX512_VBMI=OFF\" bash tools/setup.sh",
}
HINTS[signal.SIGBUS] = HINTS[signal.SIGSEGV]


def describe_exit(rc: int) -> str:
    "A child's exit in words: 'killed by SIGSEGV (segmentation fault)' or 'exited with status 1'."
    if rc >= 0: return f"exited with status {rc}"
    try: return f"killed by {signal.Signals(-rc).name} ({signal.strsignal(-rc).lower()})"
    except ValueError: return f"killed by signal {-rc}"


def check(venv: Path, timeout_s: float = 600.0) -> bool:
    "Run a one-token completion of the embedded model in a child process; say plainly what failed. True if it answered."
    python = str(venv/"bin"/"python")
    t0 = time.monotonic()
    try: r = subprocess.run([python, "-X", "faulthandler", "-c", CHECK], capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        print(f"setup: error: the embedded model gave no token in {timeout_s:g} s (machine overloaded?).\n"
              "       What to do: run tools/setup.sh again when the machine is idle.", file=sys.stderr)
        return False
    if r.returncode == 0:
        print(f"setup: the embedded model answers ({r.stdout.strip()}, {time.monotonic() - t0:.1f} s)", file=sys.stderr)
        return True
    try: record = json.loads((venv/RECORD).read_text())
    except (OSError, ValueError): record = {}
    info = cpu_info()
    exts = sorted(f for f in (info[1] if info else ()) if re.match(r"(avx|amx|fma|f16c|sse4|bmi2)", f))
    tail = "\n".join("       | " + line for line in (r.stderr or r.stdout).strip().splitlines()[-12:])
    hint = HINTS.get(-r.returncode, f"read the lines above; to rebuild from scratch: rm -rf {WHEELS} "
                     f"{venv}/{RECORD} && bash tools/setup.sh")
    print(f"setup: error: the embedded model failed a one-token completion: the child process {describe_exit(r.returncode)}.\n"
          f"       llama-cpp-python {record.get('version', '?')} built with CMAKE_ARGS={record.get('cmake_args', '?')}\n"
          f"       CPU: {info[0] if info else platform.processor()}; extensions: {' '.join(exts) or 'unknown'}\n"
          f"       Its last output:\n{tail}\n"
          f"       What to do: {hint}.\n"
          "       Capable models do not need it: --model gpt-4o, vllm:NAME, ollama:NAME, ... (see the guide's models section).",
          file=sys.stderr)
    return False


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("command", choices=["flags", "install", "check", "wheel"])
    p.add_argument("--venv", type=Path, default=ROOT/".venv", help="the virtual environment (default: .venv)")
    p.add_argument("--cmake-args", default=None, help="wheel: build with exactly these CMake arguments")
    a = p.parse_args(argv)
    if a.command == "flags":
        info = cpu_info()
        print(f"CPU: {info[0] if info else platform.processor()} ({platform.machine()})")
        print(f"CMAKE_ARGS={shlex.join(build_args())}")
    elif a.command == "install": install(a.venv)
    elif a.command == "check": sys.exit(0 if check(a.venv) else 1)
    else:   # wheel: print the path of a (cached) wheel built with --cmake-args, or this machine's arguments
        args = shlex.split(a.cmake_args) if a.cmake_args is not None else build_args()
        print(build_wheel(pinned_version(), args, nice=True))


if __name__ == "__main__":
    main()
