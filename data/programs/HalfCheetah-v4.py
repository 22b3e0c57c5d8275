"""Approximate, hand-written Code World Model of HalfCheetah-v4 for the inference-speed experiment
(nbs/24_llm_simulator.ipynb). It is NOT a faithful model: the real dynamics are MuJoCo's contact physics, which
a few lines of numpy cannot reproduce, so its next observations are wrong on almost every transition. It stands
in for a CWM of this environment in the *speed* comparison only: like any CWM it is plain numpy, and its
per-transition cost (set_state + step) is of the same order as a real one's. Its accuracy on the shipped buffer is
reported by the experiment (cwm_nb.cwm.evaluate_program).

What it does (the `Environment` contract of nbs/14_cwm.ipynb: `set_state(obs)`, `step(action) -> (next_obs, reward, done)`; the observation layout and reward of the environment's description):
- observation (17,): obs[0:8] = qpos[1:9] (rootz, rooty, six joint angles), obs[8:17] = qvel[0:9]
  (rootx, rootz, rooty velocities, six joint angular velocities);
- positions are integrated with the current velocities over dt = 5 * 0.01 = 0.05 s; velocities are kept;
- reward = forward_reward - ctrl_cost, with forward_reward approximated by the x velocity (obs[8]) and
  ctrl_cost = 0.1 * sum(action ** 2);
- done is always False: HalfCheetah never terminates (it is only truncated after 1000 steps).
"""
import numpy as np

DT = 0.05
CTRL_COST_WEIGHT = 0.1
FORWARD_REWARD_WEIGHT = 1.0


class Environment:
    def __init__(self):
        self.obs = np.zeros(17)

    def set_state(self, obs):
        self.obs = np.array(obs, dtype=np.float64)

    def step(self, action):
        action = np.asarray(action, dtype=np.float64)
        pos, vel = self.obs[:8], self.obs[8:]
        new_pos = pos + DT * vel[1:]          # rootz, rooty and the six joints move with their velocities
        self.obs = np.concatenate([new_pos, vel])
        reward = FORWARD_REWARD_WEIGHT * vel[0] - CTRL_COST_WEIGHT * float(np.sum(action ** 2))
        return self.obs.copy(), float(reward), False
