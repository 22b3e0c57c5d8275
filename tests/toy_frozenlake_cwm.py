# A hand-written world model of FrozenLake-v1 4x4 with is_slippery=False, for tests/test_any_env.py.
class Environment:
    "FrozenLake 4x4, not slippery: a hand-written world model."
    MAP = ["SFFF", "FHFH", "FFFH", "HFFG"]
    def __init__(self): self.s = 0
    def set_state(self, obs): self.s = int(obs)
    def step(self, action):
        r, c = divmod(self.s, 4)
        if action == 0: c = max(c - 1, 0)
        elif action == 1: r = min(r + 1, 3)
        elif action == 2: c = min(c + 1, 3)
        elif action == 3: r = max(r - 1, 0)
        self.s = r * 4 + c
        tile = self.MAP[r][c]
        return self.s, float(tile == "G"), tile in "GH"
