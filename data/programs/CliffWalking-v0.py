"""Reference Code World Model of CliffWalking-v0 (made as CliffWalking-v1 with is_slippery=False), written by hand
from the environment's documented rules: a 4 x 12 grid, state = row * 12 + column, start 36 (bottom left), goal 47
(bottom right); actions 0 up, 1 right, 2 down, 3 left move one cell, and a move off the grid leaves the player where
it is. Every step gives -1. Stepping onto the cliff (bottom row, columns 1 to 10) gives -100 and puts the player
back at the start WITHOUT ending the episode; reaching the goal ends it."""
N_ROWS, N_COLS = 4, 12
START, GOAL = 3 * N_COLS + 0, 3 * N_COLS + 11
MOVES = {0: (-1, 0), 1: (0, 1), 2: (1, 0), 3: (0, -1)}   # (d_row, d_col) per action


def is_cliff(row, col):
    return row == N_ROWS - 1 and 1 <= col <= N_COLS - 2


class Environment:
    def __init__(self):
        self.state = START

    def set_state(self, obs):
        self.state = int(obs)

    def step(self, action):
        row, col = divmod(self.state, N_COLS)
        d_row, d_col = MOVES[int(action)]
        row = min(max(row + d_row, 0), N_ROWS - 1)
        col = min(max(col + d_col, 0), N_COLS - 1)
        if is_cliff(row, col):
            self.state = START
            return self.state, -100, False
        self.state = row * N_COLS + col
        return self.state, -1, self.state == GOAL
