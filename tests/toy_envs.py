"""Small gymnasium environments defined outside the workbook, for tests/test_any_env.py: the entry points
`toy_envs:Corridor`, `toy_envs:make_corridor`, and environments that must fail with a clear error."""
import gymnasium as gym
import numpy as np
from gymnasium import spaces


class Corridor(gym.Env):
    """A corridor of cells with the goal at its right end.

    ## Description
    The agent starts in cell 0 of a corridor of `length` cells and walks left or right. Walking into a wall
    leaves it where it is.

    ## Action Space
    - 0: move left
    - 1: move right

    ## Observation Space
    The index of the agent's cell, an int in [0, length - 1].

    ## Rewards
    -0.1 for every step, +1 for the step that reaches the last cell.

    ## Episode End
    The episode terminates when the agent reaches the last cell.

    ## Arguments
    `length`: number of cells (default 6).
    """
    def __init__(self, length: int = 6):
        self.length = int(length)
        self.observation_space, self.action_space = spaces.Discrete(self.length), spaces.Discrete(2)
        self.pos = 0

    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        self.pos = 0
        return self.pos, {}

    def step(self, action):
        self.pos = min(max(self.pos + (1 if int(action) == 1 else -1), 0), self.length - 1)
        done = self.pos == self.length - 1
        return self.pos, (1.0 if done else -0.1), done, False, {}


def make_corridor(length: int = 6):
    "A factory entry point: the corridor under a time limit of 30 steps."
    return gym.wrappers.TimeLimit(Corridor(length), 30)


class Drift(gym.Env):
    "A point drifting on a line. Continuous actions: the push, in [-1, 1]."
    observation_space = spaces.Box(-10.0, 10.0, (2,), np.float64)
    action_space = spaces.Box(-1.0, 1.0, (1,), np.float32)

    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        self.x, self.v = -1.0, 0.0
        return np.array([self.x, self.v]), {}

    def step(self, action):
        self.v = float(np.clip(self.v + 0.1 * float(np.asarray(action).ravel()[0]), -1, 1))
        self.x = float(np.clip(self.x + self.v, -10, 10))
        return np.array([self.x, self.v]), -abs(self.x), False, False, {}


class Pixels(gym.Env):
    "Observes a 64 x 64 RGB frame."
    observation_space = spaces.Box(0, 255, (64, 64, 3), np.uint8)
    action_space = spaces.Discrete(2)

    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        return np.zeros((64, 64, 3), np.uint8), {}


class BrokenReset(gym.Env):
    "Its reset raises."
    observation_space, action_space = spaces.Discrete(2), spaces.Discrete(2)

    def reset(self, seed=None, options=None):
        raise ValueError("the level file is missing")


class LockedCorridor(Corridor):
    "The corridor holding a lock, which cannot be copied: no oracle can be built for it."
    def __init__(self, length: int = 6):
        import threading
        super().__init__(length)
        self.lock = threading.Lock()


class Beacon(gym.Env):
    """A walker on a line of 5 cells; the beacon at cell 4 is lit once the walker has passed cell 2.

    ## Observation Space
    A dict: `pos` the walker's cell (Discrete(5)), `lit` whether the beacon is on (MultiBinary(1)).

    ## Rewards
    +1 for the step onto cell 4 while the beacon is on, 0 otherwise.
    """
    observation_space = spaces.Dict({"pos": spaces.Discrete(5), "lit": spaces.MultiBinary(1)})
    action_space = spaces.Discrete(2)

    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        self.pos, self.lit = 0, 0
        return self._obs(), {}

    def _obs(self):
        return {"pos": self.pos, "lit": np.array([self.lit], np.int8)}

    def step(self, action):
        self.pos = min(max(self.pos + (1 if int(action) == 1 else -1), 0), 4)
        self.lit = int(self.lit or self.pos == 2)
        done = self.pos == 4 and bool(self.lit)
        return self._obs(), float(done), done, False, {}


class NeedsWindow(gym.Env):
    "Opens a window in its constructor, as some renderers do; here without a display."
    observation_space, action_space = spaces.Discrete(2), spaces.Discrete(2)

    def __init__(self):
        raise RuntimeError("cannot open display ':0'")
