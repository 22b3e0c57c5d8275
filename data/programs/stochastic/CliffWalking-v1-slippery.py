"""Reference Code World Model of CliffWalking-v1 made with is_slippery=True (gymnasium 1.x), written by hand from
the environment's documented rules: a 4 x 12 grid, state = row * 12 + column, start 36 (bottom left), goal 47 (bottom
right); actions 0 up, 1 right, 2 down, 3 left. On slippery ground the player moves in the intended direction or in
one of the two perpendicular ones, 1/3 each; a move off the grid leaves it where it is. Every step gives -1.
Stepping onto the cliff (bottom row, columns 1 to 10) gives -100 and puts the player back at the start WITHOUT ending
the episode; reaching the goal ends it.

`step_distribution` gives the exact distribution (directions that lead to the same outcome merged); `step` returns
its most likely outcome, the intended move when outcomes tie."""
N_ROWS, N_COLS = 4, 12
START, GOAL = 3 * N_COLS + 0, 3 * N_COLS + 11
MOVES = {0: (-1, 0), 1: (0, 1), 2: (1, 0), 3: (0, -1)}   # (d_row, d_col) per action


def is_cliff(row, col):
    return row == N_ROWS - 1 and 1 <= col <= N_COLS - 2


def outcome(state, direction):
    "(next state, reward, done) of moving one cell in `direction` from `state`."
    row, col = divmod(state, N_COLS)
    d_row, d_col = MOVES[direction]
    row, col = min(max(row + d_row, 0), N_ROWS - 1), min(max(col + d_col, 0), N_COLS - 1)
    if is_cliff(row, col):
        return START, -100.0, False
    s = row * N_COLS + col
    return s, -1.0, s == GOAL


class Environment:
    def __init__(self):
        self.state = START

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
