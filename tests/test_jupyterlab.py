"""JupyterLab on this checkout: `tools/setup.sh` registers a kernel named `cwm-nb` that runs .venv's interpreter,
and `jupyter lab`, started headless on 127.0.0.1 with a token, opens a notebook of `nbs/` and runs its cells in
that kernel (through Jupyter Server's REST API and the kernel's websocket, as the Lab page does)."""
import json, os, secrets, socket, subprocess, sys, time, uuid
from pathlib import Path
import pytest

ROOT = Path(__file__).resolve().parents[1]
KERNEL = "cwm-nb"
NOTEBOOK = "nbs/14_cwm.ipynb"

def test_setup_registers_the_cwm_nb_kernel_for_this_interpreter():
    from jupyter_client.kernelspec import KernelSpecManager, NoSuchKernel
    try: spec = KernelSpecManager().get_kernel_spec(KERNEL)
    except NoSuchKernel: pytest.fail(f"no Jupyter kernel named {KERNEL!r}: run `bash tools/setup.sh` (it registers it)")
    assert Path(spec.argv[0]) == Path(sys.executable), spec.argv   # the interpreter this checkout's tests run in
    assert spec.argv[1:] == ["-Xfrozen_modules=off", "-m", "ipykernel_launcher", "-f", "{connection_file}"] or \
        spec.argv[-4:] == ["-m", "ipykernel_launcher", "-f", "{connection_file}"], spec.argv
    assert Path(spec.resource_dir).is_relative_to(sys.prefix)   # installed into the venv (--sys-prefix), not ~
    assert spec.language == "python" and "cwm-nb" in spec.display_name

def test_every_notebook_names_the_cwm_nb_kernel():
    "So that Lab opens each with this checkout's interpreter, without asking which kernel to use."
    import nbformat
    other = {str(p.relative_to(ROOT)): nbformat.read(p, as_version=4).metadata.get("kernelspec", {}).get("name")
             for p in sorted((ROOT/"nbs").rglob("*.ipynb")) if ".ipynb_checkpoints" not in p.parts}
    other = {k: v for k, v in other.items() if v != KERNEL}
    assert not other, f"notebooks naming another kernel: {other}"

def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0)); return s.getsockname()[1]

@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    "`jupyter lab` on 127.0.0.1 with a random token, rooted at the checkout; its config and runtime files in a tmp folder."
    import httpx
    tmp, token = tmp_path_factory.mktemp("lab"), secrets.token_hex(16)
    # another venv activated in the calling shell (VIRTUAL_ENV) or a user's own kernel paths would lead Lab to a
    # `cwm-nb` kernel that runs another checkout's interpreter: this checkout's venv alone decides
    own = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "JUPYTER_PATH", "JUPYTER_DATA_DIR")}
    env = {**own, "JUPYTER_CONFIG_DIR": str(tmp/"config"), "JUPYTER_RUNTIME_DIR": str(tmp/"runtime"),
           "JUPYTERLAB_WORKSPACES_DIR": str(tmp/"workspaces")}
    log = open(tmp/"lab.log", "w")
    def start(port: int) -> subprocess.Popen:
        return subprocess.Popen([sys.executable, "-m", "jupyter", "lab", "--no-browser", "--ServerApp.ip=127.0.0.1",
                                 f"--ServerApp.port={port}", "--ServerApp.port_retries=0", f"--IdentityProvider.token={token}",
                                 f"--ServerApp.root_dir={ROOT}", "--LabApp.news_url=", "--LabApp.extension_manager=readonly",
                                 "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
                                 *(["--allow-root"] if os.geteuid() == 0 else [])],   # CI runs as root
                                env=env, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT)
    port, tries = _free_port(), 1
    proc = start(port)
    client = httpx.Client(base_url=f"http://127.0.0.1:{port}", headers={"Authorization": f"token {token}"}, timeout=30)
    try:
        deadline = time.monotonic() + 120
        while True:
            # another process may take the free port before Lab binds it: then Lab exits, and another port is tried
            taken = ("is not available", "Address already in use")   # Lab's own check, or its listen after it
            if proc.poll() is not None and tries < 3 and any(t in (tmp/"lab.log").read_text() for t in taken):
                port, tries = _free_port(), tries + 1
                proc, client.base_url = start(port), f"http://127.0.0.1:{port}"
            assert proc.poll() is None, (tmp/"lab.log").read_text()[-3000:]
            try:
                if client.get("/api/status").status_code == 200: break
            except httpx.TransportError: pass
            assert time.monotonic() < deadline, "jupyter lab did not answer in 120 s:\n" + (tmp/"lab.log").read_text()[-3000:]
            time.sleep(0.3)
        yield dict(client=client, port=port, token=token, log=tmp/"lab.log")
    finally:
        client.close()
        proc.terminate()
        try: proc.wait(timeout=20)
        except subprocess.TimeoutExpired: proc.kill(); proc.wait()
        log.close()

def _execute(ws, session: str, code: str, timeout: float = 60) -> dict:
    "Send one execute_request on a kernel's websocket; return {'stdout', 'result', 'error', 'status'} of its replies."
    msg_id = uuid.uuid4().hex
    ws.send(json.dumps({"header": {"msg_id": msg_id, "msg_type": "execute_request", "session": session, "username": "test",
                                   "version": "5.3", "date": ""},
                        "parent_header": {}, "metadata": {}, "channel": "shell", "buffers": [],
                        "content": {"code": code, "silent": False, "store_history": True, "user_expressions": {},
                                    "allow_stdin": False, "stop_on_error": True}}))
    out = {"stdout": "", "result": None, "error": None, "status": None}
    deadline, idle = time.monotonic() + timeout, False
    while not (idle and out["status"]):
        assert time.monotonic() < deadline, f"no reply in {timeout} s: {out}"
        m = json.loads(ws.recv())
        if m.get("parent_header", {}).get("msg_id") != msg_id: continue
        t, c = m["msg_type"], m["content"]
        if t == "stream" and c["name"] == "stdout": out["stdout"] += c["text"]
        elif t == "execute_result": out["result"] = c["data"].get("text/plain")
        elif t == "error": out["error"] = f"{c['ename']}: {c['evalue']}"
        elif t == "execute_reply": out["status"] = c["status"]
        elif t == "status" and c["execution_state"] == "idle": idle = True
    return out

def test_jupyter_lab_opens_a_notebook_and_runs_its_cells_in_the_cwm_nb_kernel(lab):
    import websocket   # websocket-client, a dependency of jupyter_server
    c = lab["client"]
    page = c.get("/lab")   # the Lab page itself is served
    assert page.status_code == 200 and "jupyterlab" in page.text.lower()
    assert KERNEL in c.get("/api/kernelspecs").json()["kernelspecs"]
    nb = c.get(f"/api/contents/{NOTEBOOK}").json()   # open the notebook as Lab does
    assert nb["type"] == "notebook"
    cells = [cell["source"] for cell in nb["content"]["cells"] if cell["cell_type"] == "code"]
    first = next(s for s in cells if "import" in s and not s.lstrip().startswith("#| default_exp"))
    asked = nb["content"]["metadata"]["kernelspec"]["name"]   # Lab starts the kernel the notebook names
    assert asked == KERNEL, nb["content"]["metadata"]
    r = c.post("/api/sessions", json={"path": NOTEBOOK, "type": "notebook", "name": Path(NOTEBOOK).name, "kernel": {"name": asked}})
    assert r.status_code == 201, r.text
    sess = r.json()
    assert sess["kernel"]["name"] == KERNEL
    kid, session = sess["kernel"]["id"], uuid.uuid4().hex
    ws = websocket.create_connection(f"ws://127.0.0.1:{lab['port']}/api/kernels/{kid}/channels?session_id={session}",
                                     header=[f"Authorization: token {lab['token']}"], timeout=120)
    try:
        ran = _execute(ws, session, first, timeout=120)   # the notebook's import cell
        assert ran["status"] == "ok" and ran["error"] is None, ran
        where = _execute(ws, session, "import sys, cwm_nb\nprint(cwm_nb.__file__)\nprint(sys.executable)\n", timeout=60)
        assert where["status"] == "ok", where
        file, exe = where["stdout"].split()
        assert Path(file).resolve() == (ROOT/"cwm_nb"/"__init__.py").resolve(), file   # this checkout's cwm_nb
        assert Path(exe) == Path(sys.executable)
        shown = _execute(ws, session, "from cwm_nb.bench.cwm import evaluate_program\nevaluate_program.__module__", timeout=60)
        assert shown["result"] == "'cwm_nb.bench.cwm'", shown   # an execute_result, as a cell's output shows it
    finally:
        ws.close()
        c.delete(f"/api/sessions/{sess['id']}")
