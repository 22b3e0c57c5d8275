"""Generated tokens/s of the embedded model with the portable llama-cpp-python build that tools/setup.sh makes
(`GGML_NATIVE=OFF`, the CPU's extensions named, AMX off) ÷ a native build (`GGML_NATIVE=ON`, `-march=native`),
measured side by side in one run on this machine. Goal: >= 0.9.

    python benchmarks/bench_llama_build.py --portable A --native B [--tokens 128] [--rounds 6] [--threads 1]

A and B are each a virtual environment (its `bin/python` runs the measurement) or a llama-cpp-python wheel (unpacked
into a temporary folder and imported by this interpreter). Left out, each is the wheel that tools/llama_build.py
builds for it into ~/.cache/cwm-nb/llama-wheels (about 5 minutes each on 2 cores the first time; reused after that):

    python tools/llama_build.py wheel                                              # the portable one
    python tools/llama_build.py wheel --cmake-args "-DLLAVA_BUILD=OFF -DGGML_NATIVE=ON"   # the native one

Each round loads the model once per build in a fresh child process, in alternating order, and times `--tokens`
greedy tokens after the prompt (`Llama.generate`, the loop the server runs). It prints the median tokens/s of each
build, their ratio, each build's llama.cpp system info (which shows AMX on or off) and the CPU's model and flags.
Where the native build crashes (AMX on a virtualised Sapphire Rapids), it says so and prints the portable figure.
"""
import argparse, json, os, platform, re, statistics, subprocess, sys, tempfile, zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT/"tools"))
import llama_build   # noqa: E402  (tools/llama_build.py)

NATIVE_ARGS = "-DLLAVA_BUILD=OFF -DGGML_NATIVE=ON"
FLAGS = ("avx", "avx2", "fma", "f16c", "avx_vnni", "avx512f", "avx512bw", "avx512vl", "avx512_vnni", "avx512_bf16",
         "avx512vbmi", "amx_tile", "amx_int8", "amx_bf16")

CHILD = r"""
import json, sys, time
if sys.argv[1]: sys.path.insert(0, sys.argv[1])
import llama_cpp
from llama_cpp import Llama
model, n_tokens, reps, threads = sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
m = Llama(model, n_ctx=1024, n_threads=threads, n_threads_batch=threads, seed=0, verbose=False)
prompt = m.tokenize(b"Once upon a time, in a small village by the sea,")
tps = []
for _ in range(reps):
    gen = m.generate(prompt, temp=0.0, reset=True)
    next(gen)                                   # the prompt is evaluated before the first token
    t0 = time.perf_counter()
    for _, _tok in zip(range(n_tokens), gen): pass
    tps.append(n_tokens / (time.perf_counter() - t0))
print(json.dumps(dict(tps=tps, lib=llama_cpp.__file__, info=llama_cpp.llama_print_system_info().decode())))
"""


def runner(path: Path, tmp: Path) -> tuple[str, str]:
    "(python, import folder) for a venv or a wheel."
    if path.is_dir(): return str(path/"bin"/"python"), ""
    if path.suffix != ".whl": sys.exit(f"{path}: neither a virtual environment nor a .whl")
    dest = tmp/path.stem
    with zipfile.ZipFile(path) as z: z.extractall(dest)
    for so in dest.rglob("*.so*"): so.chmod(0o755)
    return sys.executable, str(dest)


def measure(py: str, folder: str, model: str, tokens: int, reps: int, threads: int) -> dict:
    "One child: load the model, time `reps` generations. {'crash': ...} if it died."
    r = subprocess.run([py, "-c", CHILD, folder, model, str(tokens), str(reps), str(threads)],
                       capture_output=True, text=True, timeout=1800)
    if r.returncode: return dict(crash=llama_build.describe_exit(r.returncode), stderr=r.stderr[-1500:])
    return json.loads(r.stdout.strip().splitlines()[-1])


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--portable", type=Path, help="venv or wheel of the portable build (default: built/reused)")
    p.add_argument("--native", type=Path, help="venv or wheel of the native build (default: built/reused)")
    p.add_argument("--tokens", type=int, default=128, help="generated tokens timed per generation")
    p.add_argument("--rounds", type=int, default=6, help="rounds; each loads both builds once, alternating order")
    p.add_argument("--reps", type=int, default=2, help="generations per load")
    p.add_argument("--threads", type=int, default=1, help="CPU threads (1: on a shared machine two spinning ggml "
                   "threads slow down by up to 100x when one is descheduled, which swamps the difference measured)")
    a = p.parse_args()
    version = llama_build.pinned_version()
    builds = {"portable": a.portable or llama_build.build_wheel(version, llama_build.build_args(), nice=True),
              "native": a.native or llama_build.build_wheel(version, NATIVE_ARGS.split(), nice=True)}
    from cwm_nb.llm.embedded import embedded_model_path
    model = str(embedded_model_path())
    info = llama_build.cpu_info()
    cpu, flags = (info[0], info[1]) if info else (platform.processor(), set())
    print(f"CPU: {cpu} ({platform.machine()}, {os.cpu_count()} CPUs); "
          f"flags: {' '.join(f for f in FLAGS if f in flags)}; absent: {' '.join(f for f in FLAGS if f not in flags)}")
    print(f"model: {Path(model).name}; {a.tokens} generated tokens per timing, {a.threads} threads, "
          f"{a.rounds} rounds x {a.reps} generations per build")
    tps, seen = {k: [] for k in builds}, {}
    with tempfile.TemporaryDirectory() as tmp:
        run = {k: runner(Path(v), Path(tmp)) for k, v in builds.items()}
        for r in range(a.rounds):
            for k in (list(builds) if r % 2 == 0 else list(builds)[::-1]):
                if k in seen and "crash" in seen[k]: continue
                out = measure(*run[k], model, a.tokens, a.reps, a.threads)
                seen.setdefault(k, out)
                if "crash" in out: seen[k] = out; continue
                tps[k] += out["tps"]
    for k, v in builds.items():
        s = seen[k]
        print(f"\n{k}: {v}")
        if "crash" in s:
            print(f"  CRASHED: the child {s['crash']}\n  " + s["stderr"].strip().replace("\n", "\n  "))
            continue
        on = [x.split("=")[0].strip() for x in s["info"].split("|") if re.search(r"=\s*1\b", x)]
        print(f"  llama.cpp compiled in: {' '.join(on)}; AMX {'ON' if 'AMX' in s['info'] else 'off'}")
        print(f"  tokens/s: median {statistics.median(tps[k]):.1f} (min {min(tps[k]):.1f}, max {max(tps[k]):.1f}, n={len(tps[k])})")
    if all(tps.values()):
        ratio = statistics.median(tps["portable"]) / statistics.median(tps["native"])
        print(f"\nportable / native generated tokens/s: {ratio:.3f} (goal >= 0.9)")
    elif tps["portable"]:
        print(f"\nthe native build crashed here; portable: {statistics.median(tps['portable']):.1f} tokens/s on {cpu}")


if __name__ == "__main__":
    main()
