"""The WorldCoder agent with the scripted capable model (`ScriptedWorldCoderModel`: these numbers prove the mechanism,
they are not results of an LLM), against PPO, and what its planning costs.

Part 1: per environment (the MiniGrid curriculum, carried over from one environment to the next, and 2-box Sokoban),
  environment steps to the first success and to 10 successes in a row, LLM calls, and wall time per agent step outside
  the LLM (planning, sandbox checks, bookkeeping); then PPO (Stable-Baselines3, the settings of `cwm_nb.agent.rl`)
  trained from scratch on the same environment for the same number of steps the agent needed for 10 in a row, and
  (--ppo-steps) for a fixed longer budget: its first success and 10 in a row, if any.

Part 2, side by side in one run (alternating rounds, median of --repeats): planner program steps per second with the
  programs in the sandbox (a forked model process answering batched requests) ÷ the same search with the programs in
  this process, for BFS and MCTS+BM25 on DoorKey, Unlock and 2-box Sokoban starts.

Part 3 (--part 3 only): PPO alone for a long budget on each environment of --long-envs (default: 2-box Sokoban;
  add e.g. minigrid:MiniGrid-UnlockPickup-v0), --long-steps steps each: episodes, successes, first success, 10 in a
  row and the success rate of the last 100 episodes (a random policy solves some easy 2-box levels too).

Run: .venv/bin/python benchmarks/bench_agent.py [--envs all|minigrid|sokoban] [--minigrid 6] [--ppo-steps 50000] [--repeats 5] [--seed 0]
     .venv/bin/python benchmarks/bench_agent.py --part 3 [--long-envs sokoban:Sokoban-v0] [--long-steps 500000]
"""
import argparse, statistics, sys, time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def part1(envs_kind: str, ppo_steps: int, seed: int, n_minigrid: int = 6, max_episodes: int = 40):
    from cwm_nb.agent.worldcoder import AgentConfig, DOMAINS
    from cwm_nb.agent.curriculum import run_curriculum
    from cwm_nb.agent.scripted import scripted_llm
    from cwm_nb.agent.rl import train_ppo
    runs = []
    if envs_kind in ("all", "minigrid"):
        runs.append(("minigrid", list(DOMAINS["minigrid"].curricula["default"])[:n_minigrid]))
    if envs_kind in ("all", "sokoban"):
        runs.append(("sokoban", ["Sokoban-v0"]))
    print("Part 1: the agent with the scripted model (not an LLM) vs PPO on the same symbolic state")
    print(f"{'environment':34s} {'agent 1st':>9s} {'agent 10':>9s} {'calls':>5s} {'ms/step':>8s} | "
          f"{'PPO steps':>9s} {'PPO 1st':>8s} {'PPO 10':>8s} | {'PPO steps':>9s} {'PPO 1st':>8s} {'PPO 10':>8s}")
    for domain, envs in runs:
        t0 = time.perf_counter()
        res = run_curriculum(scripted_llm(), domain, envs, AgentConfig(max_episodes=max_episodes), seed=seed, progress=True)
        by_env = {}
        for e in res.episodes: by_env.setdefault(e["env"], []).append(e)
        for row in res.envs:
            eps = by_env.get(row["env"], [])
            llm_s = sum(e["llm_s"] for e in eps)
            ms = 1000 * (sum(e["wall_s"] for e in eps) - llm_s) / max(row["steps"], 1)
            same = row["solved_steps"] or row["steps"]
            p1 = train_ppo(domain, row["env"], same, seed=seed)
            p2 = train_ppo(domain, row["env"], ppo_steps, seed=seed) if ppo_steps else None
            fmt = lambda v: "-" if v is None else str(v)
            line = (f"{row['env']:34s} {fmt(row['first_success_steps']):>9s} {fmt(row['solved_steps']):>9s} "
                    f"{row['llm_calls']:5d} {ms:8.1f} | {p1['steps']:9d} {fmt(p1['first_success_steps']):>8s} "
                    f"{fmt(p1['solved_steps']):>8s}")
            if p2: line += f" | {p2['steps']:9d} {fmt(p2['first_success_steps']):>8s} {fmt(p2['solved_steps']):>8s}"
            print(line, flush=True)
        print(f"  ({domain}: agent wall {time.perf_counter() - t0:.0f} s incl. PPO; '-' = not reached)")


def part2(repeats: int, seed: int):
    from cwm_nb.agent.scripted import ScriptedWorldCoderModel
    from cwm_nb.agent.worldcoder import make_env, DOMAINS
    from cwm_nb.agent.planning import PlannerConfig, plan_with_model
    from cwm_nb.agent.oo_state import entity_api_source
    from cwm_nb.sandbox.jobs import get_sandbox
    d, sb = ScriptedWorldCoderModel(), get_sandbox()
    cases = [("minigrid", "MiniGrid-DoorKey-5x5-v0"), ("minigrid", "MiniGrid-Unlock-v0"), ("sokoban", "Sokoban-v0")]
    print(f"\nPart 2: planner program steps/s, sandbox ÷ in-process (median of {repeats} alternating rounds)")
    print(f"{'environment':26s} {'planner':8s} {'steps':>6s} {'in-process/s':>13s} {'sandbox/s':>10s} {'ratio':>6s}")
    for domain, name in cases:
        dom = DOMAINS[domain]
        api = entity_api_source(dom.entity_names)
        env = make_env(dom, name)
        s0, info = env.reset(seed=seed + 3)
        goal = info["mission"]
        for planner in ("bfs", "mcts"):
            cfg = PlannerConfig(planner=planner)
            rates = {"in-process": [], "sandbox": []}
            for _ in range(repeats):
                for where in ("in-process", "sandbox"):
                    p = plan_with_model(api, d.tier_program(domain, 2), d.reward_program(domain, goal), s0, dom.actions,
                                        dom.entity_names, goal, cfg, sandbox="in-process" if where == "in-process" else sb)
                    rates[where].append(p.model_steps / p.plan_s)
            a, b = statistics.median(rates["in-process"]), statistics.median(rates["sandbox"])
            print(f"{name:26s} {planner:8s} {p.model_steps:6d} {a:13.0f} {b:10.0f} {b / a:6.2f}", flush=True)


LONG_ENVS = "sokoban:Sokoban-v0"


def part3(envs: str, steps: int, seed: int):
    from cwm_nb.agent.rl import train_ppo
    print(f"Part 3: PPO alone, {steps} steps per environment (seed {seed})")
    print(f"{'environment':34s} {'steps':>8s} {'episodes':>8s} {'succ.':>6s} {'1st':>8s} {'10 row':>8s} {'last 100':>8s} {'wall s':>7s}")
    for item in envs.split(","):
        domain, name = item.split(":")
        r = train_ppo(domain, name, steps, seed=seed)
        last = [ok for _, ok in r["curve"][-100:]]
        fmt = lambda v: "-" if v is None else str(v)
        print(f"{name:34s} {r['steps']:8d} {r['episodes']:8d} {r['successes']:6d} {fmt(r['first_success_steps']):>8s} "
              f"{fmt(r['solved_steps']):>8s} {sum(last) / max(len(last), 1):8.2f} {r['wall_s']:7.0f}", flush=True)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--envs", default="all", choices=("all", "minigrid", "sokoban"), help="which agent runs of part 1")
    ap.add_argument("--ppo-steps", type=int, default=50_000, help="PPO's longer budget per environment (0: skip)")
    ap.add_argument("--repeats", type=int, default=5, help="rounds of part 2")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--minigrid", type=int, default=6, help="how many environments of the MiniGrid curriculum (from the first)")
    ap.add_argument("--max-episodes", type=int, default=40, help="agent episodes per environment before giving up")
    ap.add_argument("--part", type=int, default=0, choices=(0, 1, 2, 3), help="run only part 1, 2 or 3 (0: 1 and 2)")
    ap.add_argument("--long-envs", default=LONG_ENVS, help="part 3: domain:environment, comma-separated")
    ap.add_argument("--long-steps", type=int, default=500_000, help="part 3: PPO steps per environment")
    a = ap.parse_args(argv)
    if a.part in (0, 1): part1(a.envs, a.ppo_steps, a.seed, a.minigrid, a.max_episodes)
    if a.part in (0, 2): part2(a.repeats, a.seed)
    if a.part == 3: part3(a.long_envs, a.long_steps, a.seed)


if __name__ == "__main__":
    sys.exit(main())
