"""Approximate, hand-written Code World Model of Humanoid-v4 for the inference-speed experiment
(nbs/24_llm_simulator.ipynb). It is NOT a faithful model: the real dynamics are MuJoCo's articulated-body and
contact physics, which a few lines of numpy cannot reproduce, so its next observations are wrong on almost every
transition. It stands in for a CWM of this environment in the *speed* comparison only: like any CWM it is plain
numpy, and its per-transition cost (set_state + step) is of the same order as a real one's. Its accuracy on the
shipped buffer is reported by the experiment (cwm_nb.cwm.evaluate_program).

What it does (the `Environment` contract of nbs/14_cwm.ipynb: `set_state(obs)`, `step(action) -> (next_obs, reward, done)`; the observation layout and reward of the environment's description and of the
v4 code, see cwm_nb.envs notes):
- observation (376,): obs[0:22] = qpos[2:24] (torso z, torso quaternion, 17 joint angles), obs[22:45] = qvel
  (23), then cinert (140), cvel (84), qfrc_actuator (23) and cfrc_ext (84), which are kept unchanged;
- the torso height and the joint angles are integrated with their velocities over dt = 5 * 0.003 = 0.015 s;
  the quaternion and all velocities are kept;
- reward = 1.25 * x velocity (qvel[0], standing in for the centre-of-mass velocity) + healthy_reward 5
  - 0.1 * sum(action ** 2) (the v4 code subtracts no contact cost);
- done when the new torso height leaves the healthy range (1.0, 2.0).
"""
import numpy as np

DT = 0.015
FORWARD_REWARD_WEIGHT = 1.25
HEALTHY_REWARD = 5.0
CTRL_COST_WEIGHT = 0.1
HEALTHY_Z = (1.0, 2.0)


class Environment:
    def __init__(self):
        self.obs = np.zeros(376)

    def set_state(self, obs):
        self.obs = np.array(obs, dtype=np.float64)

    def step(self, action):
        action = np.asarray(action, dtype=np.float64)
        obs = self.obs.copy()
        qvel = self.obs[22:45]
        obs[0] += DT * qvel[2]                # torso height with the vertical velocity
        obs[5:22] += DT * qvel[6:23]          # the 17 joint angles with their angular velocities
        self.obs = obs
        reward = FORWARD_REWARD_WEIGHT * qvel[0] + HEALTHY_REWARD - CTRL_COST_WEIGHT * float(np.sum(action ** 2))
        done = not (HEALTHY_Z[0] < obs[0] < HEALTHY_Z[1])
        return obs.copy(), float(reward), bool(done)
