# A hand-written world model of tests/toy_envs.py:Corridor (length 6), scored and planned with in tests/test_any_env.py.
class Environment:
    "The corridor of tests/toy_envs.py, length 6: a hand-written world model."
    def __init__(self): self.pos = 0
    def set_state(self, obs): self.pos = int(obs)
    def step(self, action):
        self.pos = min(max(self.pos + (1 if int(action) == 1 else -1), 0), 5)
        done = self.pos == 5
        return self.pos, (1.0 if done else -0.1), done
