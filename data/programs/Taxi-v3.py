"""Reference Code World Model of Taxi-v3 (made as Taxi-v4 with is_rainy=False, fickle_passenger=False), written by
hand from the environment's documented rules. A 5 x 5 grid with walls (the map below); four colored stands
R (0, 0), G (0, 4), Y (4, 0), B (4, 3). State = ((taxi_row * 5 + taxi_col) * 5 + passenger) * 4 + destination, with
passenger 0-3 at a stand and 4 in the taxi. Actions: 0 south, 1 north, 2 east, 3 west, 4 pickup, 5 dropoff.
Every step gives -1, except: a pickup where the passenger is not waiting, or a dropoff with no passenger aboard or
away from the stands, gives -10 and changes nothing; a dropoff at the destination gives +20 and ends the episode; a
dropoff at another stand leaves the passenger there (-1). A move into a wall or off the grid changes nothing."""
MAP = [
    "+---------+",
    "|R: | : :G|",
    "| : | : : |",
    "| : : : : |",
    "| | : | : |",
    "|Y| : |B: |",
    "+---------+",
]
SIZE = 5
STANDS = [(0, 0), (0, 4), (4, 0), (4, 3)]
IN_TAXI = 4


def encode(row, col, passenger, destination):
    return ((row * SIZE + col) * 5 + passenger) * 4 + destination


def decode(state):
    state, destination = divmod(state, 4)
    state, passenger = divmod(state, 5)
    row, col = divmod(state, SIZE)
    return row, col, passenger, destination


def wall_east_of(row, col):
    "True when a wall (or the grid's edge) is between (row, col) and (row, col + 1)."
    return MAP[row + 1][2 * col + 2] != ":"


class Environment:
    def __init__(self):
        self.state = 0

    def set_state(self, obs):
        self.state = int(obs)

    def step(self, action):
        row, col, passenger, destination = decode(self.state)
        action, reward, done = int(action), -1, False
        if action == 0:
            row = min(row + 1, SIZE - 1)
        elif action == 1:
            row = max(row - 1, 0)
        elif action == 2:
            if not wall_east_of(row, col): col += 1
        elif action == 3:
            if col > 0 and not wall_east_of(row, col - 1): col -= 1
        elif action == 4:
            if passenger != IN_TAXI and (row, col) == STANDS[passenger]: passenger = IN_TAXI
            else: reward = -10
        elif action == 5:
            if passenger == IN_TAXI and (row, col) == STANDS[destination]:
                passenger, reward, done = destination, 20, True
            elif passenger == IN_TAXI and (row, col) in STANDS:
                passenger = STANDS.index((row, col))
            else:
                reward = -10
        self.state = encode(row, col, passenger, destination)
        return self.state, reward, done
