# A hand-written world model of tests/toy_envs.py:Beacon, whose Dict observation arrives flattened: [lit, pos].
import numpy as np

class Environment:
    def set_state(self, obs):
        self.lit, self.pos = int(obs[0]), int(obs[1])

    def step(self, action):
        self.pos = min(max(self.pos + (1 if int(action) == 1 else -1), 0), 4)
        self.lit = int(self.lit or self.pos == 2)
        done = self.pos == 4 and self.lit == 1
        return np.array([self.lit, self.pos]), float(done), done
