"""A real one-node SLURM, started by these tests: `cwm-nb sweep --executor slurm` submits its jobs with `sbatch`
(through submitit) and they run on that node.

The cluster is this machine: `munged` with its own key and socket, then `slurmctld -D` and `slurmd -D` as child
processes of a session fixture, with their ports chosen free on this host and their state, spool and logs in a
temporary folder. It keeps no accounting (so `sacct` fails and the sweep follows its jobs with `squeue`), tracks a
job's processes through /proc (`proctrack/linuxproc`) and uses no cgroups (`task/none`), which is what runs in a
container. The daemons run as root (`SlurmUser=root`, `SlurmdUser=root`). Skipped, saying why, when SLURM's
programs are missing (`tools/setup.sh --dev` installs Debian's `slurmctld`, `slurmd` and `munge` as root) or the
tests do not run as root."""
import json, os, shutil, signal, socket, subprocess, sys, time
from pathlib import Path
import pytest

CLI = str(Path(sys.executable).parent/"cwm-nb")
DAEMONS = ("munged", "slurmctld", "slurmd")
CLIENTS = ("sbatch", "srun", "squeue", "sinfo", "scontrol", "scancel")
SEEDS = (0, 1)
# run options of the sweep's grid, e.g. ("--set", "C=0.1,5"); N_VALUES: the runs per seed they make
OPTIONS: tuple = ("--set", "C=0.1,5")
N_VALUES = 2
MARKER = "Marker: this description came with the job (4e1d)."

SLURM_CONF = """\
ClusterName=cwmnbtest
SlurmctldHost={node}(127.0.0.1)
SlurmctldPort={ctld_port}
SlurmdPort={d_port}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={munge_socket}
StateSaveLocation={dir}/state
SlurmdSpoolDir={dir}/spool
SlurmctldPidFile={dir}/slurmctld.pid
SlurmdPidFile={dir}/slurmd.pid
SlurmctldLogFile={dir}/slurmctld.log
SlurmdLogFile={dir}/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MpiDefault=none
SwitchType=switch/none
MailProg=/bin/true
ReturnToService=2
MinJobAge=3600
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
NodeName={node} NodeAddr=127.0.0.1 CPUs={cpus} State=UNKNOWN
PartitionName=debug Nodes={node} Default=YES MaxTime=INFINITE State=UP
"""


def programs() -> dict:
    "Where SLURM's and munge's programs are (None: missing); the daemons live in /usr/sbin."
    path = os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/sbin"])
    return {p: shutil.which(p, path=path) for p in DAEMONS + CLIENTS}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("", 0)); return s.getsockname()[1]


def write_conf(d: Path, node: str) -> Path:
    "A slurm.conf for one node, this host, with free ports and everything it writes under `d`."
    conf = d/"slurm.conf"
    conf.write_text(SLURM_CONF.format(node=node, ctld_port=free_port(), d_port=free_port(), dir=d,
                                      munge_socket=d/"munge"/"munge.socket", cpus=len(os.sched_getaffinity(0))))
    return conf


def logs(d: Path) -> str:
    "The last lines of each daemon's log, for a failure message."
    return "\n".join(f"--- {p.name}\n" + "\n".join(p.read_text(errors="replace").splitlines()[-15:])
                     for p in sorted(d.glob("*.out")) + sorted(d.glob("*.log")))


def wait_for(ok, procs: list, d: Path, what: str, timeout: float = 120):
    "Poll `ok()` until it holds; fail, with the daemons' logs, if a daemon exits or `timeout` seconds pass."
    deadline = time.monotonic() + timeout
    while not ok():
        dead = [p.args[0] for p in procs if p.poll() is not None]
        if dead or time.monotonic() > deadline:
            pytest.fail(f"the test SLURM did not start ({what}; exited: {dead or 'none'})\n{logs(d)}")
        time.sleep(0.5)


def stop(p: subprocess.Popen):
    "SIGTERM the process group of `p` (started in a session of its own), SIGKILL it after 30 s."
    try: os.killpg(p.pid, signal.SIGTERM)
    except ProcessLookupError: return
    try: p.wait(30)
    except subprocess.TimeoutExpired: os.killpg(p.pid, signal.SIGKILL); p.wait()


@pytest.fixture(scope="session")
def slurm_cluster(tmp_path_factory):
    "A one-node SLURM on this machine for the session: its environment (`SLURM_CONF`), folder and node name."
    if os.geteuid() != 0:
        pytest.skip("the test SLURM runs its daemons as root (SlurmUser=root): run the tests as root")
    found = programs()
    missing = [p for p, f in found.items() if f is None]
    if missing:
        pytest.skip(f"SLURM is not installed ({', '.join(missing)} not found): as root, `tools/setup.sh --dev` "
                    "installs Debian's slurmctld, slurmd and munge")
    d = tmp_path_factory.mktemp("slurm")
    for sub in ("state", "spool", "munge"): (d/sub).mkdir()
    (d/"munge").chmod(0o700)
    key, sock = d/"munge"/"munge.key", d/"munge"/"munge.socket"
    key.write_bytes(os.urandom(1024)); key.chmod(0o400)
    node = socket.gethostname().split(".")[0]
    env = {**os.environ, "SLURM_CONF": str(write_conf(d, node))}
    procs = []
    def start(name, *args):
        with open(d/f"{name}.out", "wb") as out:
            procs.append(subprocess.Popen([found[name], *args], stdout=out, stderr=subprocess.STDOUT,
                                          stdin=subprocess.DEVNULL, env=env, start_new_session=True))
    def node_state() -> str:
        r = subprocess.run([found["sinfo"], "-h", "-N", "-n", node, "-o", "%t"], capture_output=True, text=True,
                           env=env, timeout=60)
        return r.stdout.strip()
    try:
        start("munged", "--foreground", "--force", f"--socket={sock}", f"--key-file={key}",
              f"--pid-file={d}/munge/munged.pid", f"--seed-file={d}/munge/munged.seed")
        wait_for(sock.exists, procs, d, "munged's socket")
        for attempt in (1, 2, 3):   # a port chosen free may be taken before a daemon binds it: then new ports
            start("slurmctld", "-D", "-f", env["SLURM_CONF"])
            start("slurmd", "-D", "-f", env["SLURM_CONF"], "-N", node)
            try: wait_for(lambda: node_state() == "idle", procs, d, f"node {node} idle in sinfo"); break
            except pytest.fail.Exception:
                if attempt == 3 or "Address already in use" not in logs(d): raise
                for p in procs[1:]: stop(p)
                del procs[1:]
                write_conf(d, node)
        yield dict(env=env, dir=d, node=node)
    finally:
        if len(procs) == 3:   # no job outlives the cluster
            subprocess.run([found["scancel"], "--user", "root"], env=env, capture_output=True, timeout=60)
            try: wait_for(lambda: not subprocess.run([found["squeue"], "-h"], capture_output=True, text=True,
                                                     env=env, timeout=60).stdout.strip(), procs, d, "squeue empty", 60)
            except pytest.fail.Exception: pass
        for p in reversed(procs): stop(p)


def test_a_sweep_runs_its_jobs_on_slurm(slurm_cluster, tmp_path):
    """`cwm-nb sweep --executor slurm` on the one-node SLURM: each job is a SLURM batch job that runs to completion,
    with the description file the sweep was given; the run folders are complete and indexed, the queue is empty."""
    from cwm_nb.bench.envs import describe_env
    from cwm_nb.experiments.runs import is_complete
    from cwm_nb.experiments.index import find_run_dirs, load_index
    from cwm_nb.testing.provider_double import ProviderDouble
    env, node = slurm_cluster["env"], slurm_cluster["node"]
    desc = tmp_path/"user"/"cartpole.md"; desc.parent.mkdir()
    desc.write_text(describe_env("CartPole-v1").rstrip() + f"\n\n{MARKER}\n")
    out = tmp_path/"sweep"
    with ProviderDouble("openai", answers="capable", idle_timeout=600) as d:
        r = subprocess.run([CLI, "sweep", "cwmb", "--envs", "CartPole-v1", "--methods", "gif-mcts", "--models",
                            "openai:gpt-4o", "--base-url", d.base_url, "--budgets", "1",
                            "--seeds", ",".join(map(str, SEEDS)), "--plan-preset", "none", "--no-progress",
                            "--executor", "slurm", "--slurm-time", "10", "--description", str(desc), *OPTIONS,
                            "--out", str(out)], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=1200)
        prompts = [json.dumps(q.get("body")) for q in d.requests()]
    n = len(SEEDS)*N_VALUES
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "SLURM via submitit" in r.stderr and "no accounting, jobs followed with squeue" in r.stderr, r.stderr
    assert f"{n} ran" in r.stdout and "0 failed" in r.stdout, r.stdout
    # each job was a SLURM batch job: submitit's folder is named by its job id, and the controller ran it here
    ids = sorted(p.name for p in (out/".submitit").iterdir() if p.is_dir())
    assert len(ids) == n and all(i.isdigit() for i in ids), ids
    for i in ids:
        assert (out/".submitit"/i/f"{i}_0_result.pkl").exists()
        job = subprocess.run(["scontrol", "show", "job", i], capture_output=True, text=True, env=env).stdout
        assert "JobName=cwm-nb" in job and "JobState=COMPLETED" in job and f" NodeList={node}\n" in job, job
    assert subprocess.run(["squeue", "-h"], capture_output=True, text=True, env=env).stdout.strip() == ""
    rds = find_run_dirs(out)
    assert len(rds) == n and all(is_complete(rd) for rd in rds)
    for rd in rds:   # the description travelled with the job
        assert Path(json.loads((rd/"settings.json").read_text())["description"]).parent.parent == out/".inputs"
        assert (rd/"description.md").read_text() == desc.read_text()
    # the grid's option values may share each seed's first answer (the response cache, when one job's answer is
    # stored before the other asks)
    assert len(SEEDS) <= len(prompts) <= n and all(MARKER in p for p in prompts)
    # the option grid reached each job's search
    ran_with = sorted(json.loads((rd/"checkpoint.json").read_text())["config"]["C"] for rd in rds)
    assert ran_with == [0.1]*len(SEEDS) + [5.0]*len(SEEDS), ran_with
    df = load_index(out)
    assert len(df) == n and set(df.status) == {"complete"} and set(df.env) == {"CartPole-v1"}


def test_a_slurm_sweep_without_a_controller_is_refused_before_anything_starts(tmp_path):
    "SLURM's commands are here but no controller answers (nothing listens on its port): a clear error, no job."
    found = programs()
    if not (found["srun"] and found["scontrol"]):
        pytest.skip("SLURM's client commands are not installed (`tools/setup.sh --dev` as root installs them)")
    (tmp_path/"munge").mkdir()
    env = {**os.environ, "SLURM_CONF": str(write_conf(tmp_path, socket.gethostname().split(".")[0]))}
    r = subprocess.run([CLI, "sweep", "cwmb", "--envs", "CartPole-v1", "--executor", "slurm", "--out",
                        str(tmp_path/"out")], capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 2, r.stderr[-2000:]
    assert "no SLURM controller answers" in r.stderr and "What to do" in r.stderr and "Traceback" not in r.stderr
    assert not (tmp_path/"out").exists()


def test_a_cancelled_slurm_job_fails_its_sweep_and_a_rerun_completes_it(slurm_cluster, tmp_path):
    """Without accounting a job that ends without a result is seen through `squeue`: cancelled while it waits for
    its model, it is reported failed (the sweep does not wait for ever); the same command then runs it again."""
    from cwm_nb.experiments.runs import is_complete
    from cwm_nb.experiments.index import find_run_dirs
    from cwm_nb.testing.provider_double import ProviderDouble
    env, out = slurm_cluster["env"], tmp_path/"sweep"
    squeue = lambda *a: subprocess.run(["squeue", "-h", *a], capture_output=True, text=True, env=env).stdout.split()
    with ProviderDouble("openai", answers="capable", latency=600, idle_timeout=900) as d:
        args = [CLI, "sweep", "cwmb", "--envs", "CartPole-v1", "--methods", "gif-mcts", "--models", "openai:gpt-4o",
                "--base-url", d.base_url, "--budgets", "1", "--seeds", "0", "--plan-preset", "none", "--no-progress",
                "--executor", "slurm", "--slurm-time", "10", "--out", str(out)]
        p = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        try:   # the job runs (and then waits 600 s for its model's answer)
            wait_for(lambda: squeue("-t", "RUNNING", "-o", "%i"), [p], slurm_cluster["dir"], "a running job")
            (job,) = squeue("-t", "RUNNING", "-o", "%i")
            subprocess.run(["scancel", job], env=env, check=True)
            stdout, stderr = p.communicate(timeout=600)
        finally:
            if p.poll() is None: p.kill(); p.wait()
        assert p.returncode == 1, stdout[-2000:] + stderr[-2000:]
        assert "0 ran" in stdout and "1 failed" in stdout and f"SLURM job {job} ended (CANCELLED)" in stdout, stdout
        d.restart(latency=0)   # the same endpoint, answering at once
        r = subprocess.run(args, capture_output=True, text=True, env=env, timeout=1200)
    assert r.returncode == 0 and "1 ran" in r.stdout and "0 failed" in r.stdout, r.stdout[-2000:] + r.stderr[-2000:]
    (rd,) = find_run_dirs(out)
    assert is_complete(rd)
    assert squeue() == []
