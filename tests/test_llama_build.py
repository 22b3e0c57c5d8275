"""tools/llama_build.py: the CMake arguments of llama-cpp-python for a CPU (extensions named, AMX off), the wheel
keyed by version and flags, the record that makes an unchanged re-run of set-up install nothing, and the one-token
check that says how a child died."""
import json, subprocess, sys
from pathlib import Path
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]/"tools"))
import llama_build as B   # noqa: E402

# /proc/cpuinfo flags (abridged) of a Sapphire Rapids Xeon in a VM, and of a Haswell laptop
SPR = set("fpu sse4_2 avx avx2 bmi2 fma f16c avx_vnni avx512f avx512cd avx512vl avx512dq avx512bw avx512vbmi "
          "avx512_vnni avx512_bf16 amx_tile amx_int8 amx_bf16 hypervisor".split())
HASWELL = set("fpu sse4_2 avx avx2 bmi2 fma f16c".split())


def opts(args):
    return dict(a[2:].split("=", 1) for a in args if a.startswith("-D"))


def test_sapphire_rapids_gets_its_extensions_and_no_amx():
    o = opts(B.portable_args(SPR, "x86_64"))
    assert o["GGML_NATIVE"] == "OFF"   # no -march=native, which would compile the AMX path in
    assert all(o[k] == "ON" for k in ("GGML_AVX2", "GGML_FMA", "GGML_F16C", "GGML_AVX512", "GGML_AVX512_VNNI",
                                      "GGML_AVX512_BF16", "GGML_AVX_VNNI"))
    assert [o[k] for k in B.AMX_OPTIONS] == ["OFF"] * 3


def test_a_cpu_without_avx512_gets_it_off():
    o = opts(B.portable_args(HASWELL, "x86_64"))
    assert (o["GGML_AVX2"], o["GGML_AVX512"], o["GGML_AVX512_VNNI"], o["GGML_AVX_VNNI"]) == ("ON", "OFF", "OFF", "OFF")
    # GGML_AVX512 compiles with five -mavx512* flags: one missing turns it off
    assert opts(B.portable_args(SPR - {"avx512bw"}, "x86_64"))["GGML_AVX512"] == "OFF"


def test_arm_keeps_llama_cpps_default():
    assert B.portable_args({"asimd", "sve"}, "aarch64") == B.BASE_ARGS


def test_the_users_cmake_args_come_last_and_win(monkeypatch):
    args = B.build_args("-DGGML_AVX512=OFF -DGGML_CUDA=ON")
    assert args[-2:] == ["-DGGML_AVX512=OFF", "-DGGML_CUDA=ON"]


def test_the_wheel_is_keyed_by_version_and_flags():
    a = B.portable_args(SPR, "x86_64")
    assert B.wheel_key("0.3.36", a) == B.wheel_key("0.3.36", list(a))
    assert len({B.wheel_key("0.3.36", a), B.wheel_key("0.3.36", a + ["-DGGML_NATIVE=ON"]), B.wheel_key("0.3.37", a)}) == 3


def test_version_and_cpu_are_read_from_the_files(tmp_path):
    assert B.pinned_version() == "0.3.36"
    (tmp_path/"cpuinfo").write_text("processor\t: 0\nmodel name\t: Intel(R) Xeon(R) Platinum 8480+\n"
                                    "flags\t\t: fpu avx2 amx_tile\n\nprocessor\t: 1\nflags\t\t: fpu\n")
    assert B.cpu_info(str(tmp_path/"cpuinfo")) == ("Intel(R) Xeon(R) Platinum 8480+", {"fpu", "avx2", "amx_tile"})
    assert B.cpu_info(str(tmp_path/"absent")) is None


def _fake_venv(tmp_path, script: str) -> Path:
    "A venv whose python is a shell `script` (it sees the arguments as $@)."
    (tmp_path/"bin").mkdir()
    py = tmp_path/"bin"/"python"
    py.write_text("#!/bin/sh\n" + script + "\n"); py.chmod(0o755)
    return tmp_path


def test_an_unchanged_rerun_installs_nothing_and_other_flags_reinstall(tmp_path, monkeypatch):
    calls = tmp_path/"calls.txt"
    venv = _fake_venv(tmp_path, f'echo "$@" >> {calls}; case "$*" in *importlib.metadata*) echo 0.3.36;; esac')
    monkeypatch.setenv("CMAKE_ARGS", "")
    wheel = tmp_path/"llama_cpp_python-0.3.36-py3-none-linux_x86_64.whl"
    built = []
    monkeypatch.setattr(B, "build_wheel", lambda version, args, python=None, nice=False: built.append(args) or wheel)
    rec = B.install(venv)                                 # nothing recorded: build and install
    assert len(built) == 1 and "pip install" in calls.read_text() and rec["key"] == B.wheel_key("0.3.36", built[0])
    assert json.loads((venv/B.RECORD).read_text())["cmake_args"] == rec["cmake_args"]
    calls.write_text("")
    B.install(venv)                                       # the same flags: nothing built, nothing installed
    assert len(built) == 1 and "pip install" not in calls.read_text()
    monkeypatch.setenv("CMAKE_ARGS", "-DGGML_AVX512=OFF")
    B.install(venv)                                       # other flags: their own wheel, installed over the old one
    assert len(built) == 2 and "--force-reinstall" in calls.read_text()


def test_the_check_names_the_signal_and_says_what_to_do(tmp_path, capsys):
    venv = _fake_venv(tmp_path, "kill -ILL $$")            # a build with an instruction this CPU lacks
    (venv/B.RECORD).write_text(json.dumps(dict(version="0.3.36", cmake_args="-DGGML_AVX512=ON")))
    assert B.check(venv) is False
    err = capsys.readouterr().err
    assert "killed by SIGILL (illegal instruction)" in err and "CMAKE_ARGS=-DGGML_AVX512=ON" in err
    assert "What to do:" in err and "tools/setup.sh" in err


def test_the_check_passes_when_the_child_answers(tmp_path, capsys):
    assert B.check(_fake_venv(tmp_path, "echo \"one token: ' Paris'\"")) is True
    assert "the embedded model answers" in capsys.readouterr().err
