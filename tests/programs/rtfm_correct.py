"""An RTFM world model written from the environment description (cwm_nb.rtfm.RTFMEnv docstring), for the tests.

The CWM contract of spec §1.1: `Environment()`, `set_state((board, inventory))`, and
`step(action) -> ((board, inventory), valid_actions, reward, done)`. Standard library and numpy only.
"""
import numpy as np

SIZE = 6
DELTA = {0: (0, 0), 1: (-1, 0), 2: (1, 0), 3: (0, -1), 4: (0, 1)}   # Stay, Up, Down, Left, Right

# The manual: which modifier beats which element, and which monster kind the goal's group is made of.
BEATEN_BY = {"cold": "shimmering", "fire": "grandmasters", "lightning": "blessed", "poison": "gleaming"}
GOAL_KIND = "dragon"   # "Defeat the Order of the Forest"; dragons are the Order of the Forest

WEAPONS = {"shimmering axe", "grandmasters bow"}
MONSTERS = {"cold dragon", "fire demon"}


class Environment:
    def __init__(self):
        self.board = np.full((SIZE, SIZE, 2), "empty", dtype=object)
        self.inventory = "empty"

    def set_state(self, state):
        board, inventory = state
        self.board = np.array(board, dtype=object).copy()
        self.inventory = str(inventory)

    def _find_player(self):
        rows, cols = np.nonzero(self.board[:, :, 0] == "you")
        return (int(rows[0]), int(cols[0])) if len(rows) else None

    def _valid_actions(self):
        here = self._find_player()
        if here is None:
            return np.array([0, 1, 2, 3, 4])
        valid = []
        for action, (dr, dc) in DELTA.items():
            r, c = here[0] + dr, here[1] + dc
            inside = 0 <= r < SIZE and 0 <= c < SIZE
            if action == 0 or (inside and self.board[r, c, 0] != "wall"):
                valid.append(action)
        return np.array(valid)

    def _observation(self):
        return (self.board.copy(), self.inventory)

    def step(self, action):
        action = int(action)
        here = self._find_player()
        reward, done = 0, False
        dr, dc = DELTA[action]
        r, c = here[0] + dr, here[1] + dc
        blocked = not (0 <= r < SIZE and 0 <= c < SIZE) or self.board[r, c, 0] == "wall"
        if action != 0 and not blocked:
            target = self.board[r, c, 0]
            if target in MONSTERS:
                element, kind = target.split(" ")
                holding = self.inventory.split(" ")[0] if self.inventory != "empty" else None
                done = True
                if holding == BEATEN_BY[element]:          # the monster dies, the player takes its cell
                    self.board[here[0], here[1], 0] = "empty"
                    self.board[r, c, 0] = "you"
                    reward = 1 if kind == GOAL_KIND else -1
                else:                                      # the player dies and leaves the board
                    self.board[here[0], here[1], 0] = "empty"
                    reward = -1
            else:
                if target in WEAPONS:                      # pick up; a weapon already held is lost
                    self.inventory = target
                self.board[here[0], here[1], 0] = "empty"
                self.board[r, c, 0] = "you"
        return self._observation(), self._valid_actions(), reward, done
