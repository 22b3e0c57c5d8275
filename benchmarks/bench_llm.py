"""Embedded model throughput: the workbook's HTTP path vs llama-cpp-python called in process.

Side by side in one run, on the same GGUF, thread count, context size, prompt, sampling parameters and seeds:
  workbook: get_llm("embedded", cache=False).complete(...)  -> llama-cpp-python server child on 127.0.0.1, over HTTP
  direct:   llama_cpp.Llama(...).create_completion(...)      -> in this process
Each round uses a fresh prompt (the round number comes first, so neither side reuses a cached prompt prefix);
generated tokens/s = completion tokens / wall time of the call (prompt processing included on both sides).
Prints per-side medians and the ratio workbook / direct (goal >= 0.9).

Usage: .venv/bin/python benchmarks/bench_llm.py [--rounds 5] [--max-tokens 128]
"""
import argparse, statistics, time
from cwm_nb.llm.client import prefill_of, render_plain, request_seed
from cwm_nb.llm.models import get_llm

TASK = ("Below is the documentation of a reinforcement-learning environment. Write a Python class `Environment` "
        "with `set_state(obs)` and `step(action) -> (next_obs, reward, done)` that reproduces it exactly.\n\n"
        "CartPole: a pole is attached by an un-actuated joint to a cart, which moves along a frictionless track. "
        "The pendulum is placed upright on the cart and the goal is to balance the pole by applying forces in the "
        "left and right direction on the cart. The observation is (cart position, cart velocity, pole angle, pole "
        "angular velocity). Action 0 pushes the cart to the left, 1 to the right. A reward of +1 is given for every "
        "step taken. The episode ends if the pole angle exceeds 12 degrees or the cart leaves the track (2.4).")


def messages(round_: int) -> list[dict]:
    return [{"role": "system", "content": f"Session {round_}. You are an experienced Python developer."},
            {"role": "user", "content": TASK},
            {"role": "assistant", "content": "```python\nimport numpy as np\n\nclass Environment:\n"}]


def main(rounds: int = 5, max_tokens: int = 128, seed: int = 0):
    from llama_cpp import Llama
    wb = get_llm("embedded", cache=False, max_tokens=max_tokens)   # starts the server child
    srv = wb.server
    direct = Llama(model_path=str(srv.model_path), n_threads=srv.n_threads, n_threads_batch=srv.n_threads,
                   n_ctx=srv.n_ctx, logits_all=False, verbose=False)
    p = wb.sampling_params()
    # the server's defaults for what the OpenAI API does not carry, set explicitly for the direct call
    extra = dict(top_k=40, min_p=0.05, repeat_penalty=1.1)

    def run_wb(r):
        t0 = time.perf_counter(); c = wb.complete(messages(r), seed=seed, draw=r)
        return c.completion_tokens, c.prompt_tokens, time.perf_counter() - t0, c.text

    def run_direct(r):
        msgs = messages(r)
        t0 = time.perf_counter()
        out = direct.create_completion(render_plain(msgs), max_tokens=p["max_tokens"], temperature=p["temperature"],
                                       top_p=p["top_p"], seed=request_seed(seed, r), **extra)
        dt = time.perf_counter() - t0
        return out["usage"]["completion_tokens"], out["usage"]["prompt_tokens"], dt, prefill_of(msgs) + out["choices"][0]["text"]

    run_wb(-1); run_direct(-2)  # warm-up (page in the weights, start threads)
    rows, same = [], 0
    for r in range(rounds):  # alternate which side goes first
        if r % 2 == 0: a = run_wb(r); b = run_direct(r)
        else: b = run_direct(r); a = run_wb(r)
        rows.append((a, b)); same += a[3] == b[3]
        print(f"round {r}: workbook {a[0]} tok in {a[2]:.2f} s ({a[0]/a[2]:.1f} tok/s, prompt {a[1]}) | "
              f"direct {b[0]} tok in {b[2]:.2f} s ({b[0]/b[2]:.1f} tok/s, prompt {b[1]})")
    wb_tps = statistics.median(a[0]/a[2] for a, _ in rows)
    d_tps = statistics.median(b[0]/b[2] for _, b in rows)
    print(f"\nembedded model, {srv.n_threads} threads, n_ctx {srv.n_ctx}, max_tokens {max_tokens}, {rounds} rounds")
    print(f"workbook (HTTP, get_llm('embedded')): {wb_tps:6.1f} generated tokens/s (median)")
    print(f"llama-cpp-python in process:          {d_tps:6.1f} generated tokens/s (median)")
    paired = statistics.median((a[0]/a[2]) / (b[0]/b[2]) for a, b in rows)
    print(f"ratio workbook / direct: {wb_tps/d_tps:.3f}  (goal >= 0.9); median of per-round ratios {paired:.3f}")
    print(f"identical texts for identical seeds: {same}/{rounds}")
    srv.stop()


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--seed", type=int, default=0)
    main(**{k.replace("-", "_"): v for k, v in vars(ap.parse_args()).items()})
