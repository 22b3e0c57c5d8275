"""Reference Code World Model of RTFM (the stationary, deterministic "Read to Fight Monsters" grid world), written by
hand from the environment's description (nbs/10_rtfm.ipynb). The state is (board, inventory): board[row, column,
layer] of strings on a 6 x 6 room whose outer ring is wall; layer 1 is always "empty". Actions: 0 stay, 1 up, 2 down,
3 left, 4 right. Moving onto a weapon picks it up (it replaces the weapon carried). Moving onto a monster ends the
episode: if the carried weapon's modifier beats the monster's element (the manual), the monster dies and the player
takes its cell, +1 if the monster belongs to the goal's group (dragons, the Order of the Forest) and -1 otherwise;
if not, the player dies and leaves the board (-1). Moving into a wall changes nothing. `step` returns
((board, inventory), valid_actions, reward, done); valid actions are stay plus every move that does not lead into a
wall, and all five when the player is no longer on the board."""
import numpy as np

SIZE = 6
MOVES = [(0, 0), (-1, 0), (1, 0), (0, -1), (0, 1)]   # (d_row, d_col) of stay, up, down, left, right

# The manual: the weapon modifier that beats each element, the monster kind of each group; and the goal.
MODIFIER_BEATING = {"cold": "shimmering", "fire": "grandmasters", "lightning": "blessed", "poison": "gleaming"}
GROUP_OF_KIND = {"dragon": "order of the forest", "demon": "rebel enclave", "jinn": "star alliance"}
GOAL_GROUP = "order of the forest"


def kind_of(name):
    "'monster', 'weapon' or None for a board string such as 'cold dragon' or 'shimmering axe'."
    parts = name.split(" ")
    if len(parts) != 2: return None
    if parts[0] in MODIFIER_BEATING and parts[1] in GROUP_OF_KIND: return "monster"
    if parts[0] in MODIFIER_BEATING.values(): return "weapon"
    return None


class Environment:
    def __init__(self):
        self.board = np.full((SIZE, SIZE, 2), "empty", dtype=object)
        self.inventory = "empty"

    def set_state(self, state):
        board, inventory = state
        self.board = np.array(board, dtype=object).reshape(SIZE, SIZE, 2).copy()
        self.inventory = str(inventory)

    def player(self):
        for r in range(SIZE):
            for c in range(SIZE):
                if self.board[r, c, 0] == "you": return r, c
        return None

    def valid_actions(self):
        here = self.player()
        if here is None: return np.arange(5)
        ok = [0]
        for a in range(1, 5):
            r, c = here[0] + MOVES[a][0], here[1] + MOVES[a][1]
            if 0 <= r < SIZE and 0 <= c < SIZE and self.board[r, c, 0] != "wall": ok.append(a)
        return np.array(ok)

    def result(self, reward, done):
        return (self.board.copy(), self.inventory), self.valid_actions(), reward, done

    def step(self, action):
        here = self.player()
        d_row, d_col = MOVES[int(action)]
        r, c = here[0] + d_row, here[1] + d_col
        if (d_row, d_col) == (0, 0) or not (0 <= r < SIZE and 0 <= c < SIZE) or self.board[r, c, 0] == "wall":
            return self.result(0, False)
        target = str(self.board[r, c, 0])
        if kind_of(target) == "monster":
            element, kind = target.split(" ")
            self.board[here[0], here[1], 0] = "empty"
            if self.inventory.split(" ")[0] != MODIFIER_BEATING[element]:
                return self.result(-1, True)                 # the player dies
            self.board[r, c, 0] = "you"
            return self.result(1 if GROUP_OF_KIND[kind] == GOAL_GROUP else -1, True)
        if kind_of(target) == "weapon":
            self.inventory = target
        self.board[here[0], here[1], 0] = "empty"
        self.board[r, c, 0] = "you"
        return self.result(0, False)
