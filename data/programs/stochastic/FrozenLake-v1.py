"""Reference Code World Model of FrozenLake-v1 as gymnasium makes it by default: the 4 x 4 map below and
is_slippery=True, written by hand from the environment's documented rules. State = row * 4 + column; actions 0 left,
1 down, 2 right, 3 up. On the slippery ice the agent moves in the intended direction or in one of the two
perpendicular ones, 1/3 each; a move off the grid leaves it where it is. Reaching G pays 1 and ends the episode;
falling into a hole H ends it with 0; every other step pays 0.

`step_distribution` gives the exact distribution (directions that lead to the same cell merged); `step` returns its
most likely outcome, the intended move when outcomes tie."""
MAP = ("SFFF",
       "FHFH",
       "FFFH",
       "HFFG")
N_ROWS, N_COLS = len(MAP), len(MAP[0])
MOVES = {0: (0, -1), 1: (1, 0), 2: (0, 1), 3: (-1, 0)}   # (d_row, d_col) per action


def outcome(state, direction):
    "(next state, reward, done) of moving one cell in `direction` from `state`."
    row, col = divmod(state, N_COLS)
    d_row, d_col = MOVES[direction]
    row, col = min(max(row + d_row, 0), N_ROWS - 1), min(max(col + d_col, 0), N_COLS - 1)
    cell = MAP[row][col]
    return row * N_COLS + col, float(cell == "G"), cell in "GH"


class Environment:
    def __init__(self):
        self.state = 0

    def set_state(self, obs):
        self.state = int(obs)

    def step_distribution(self, action):
        a = int(action)
        merged = {}
        for direction in (a, (a - 1) % 4, (a + 1) % 4):   # the intended move first: it wins ties in `step`
            o = outcome(self.state, direction)
            merged[o] = merged.get(o, 0.0) + 1 / 3
        return [(p, s, r, done) for (s, r, done), p in merged.items()]

    def step(self, action):
        p, s, r, done = max(self.step_distribution(action), key=lambda e: e[0])
        self.state = s
        return s, r, done
