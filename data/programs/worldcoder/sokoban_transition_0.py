MOVES = {"up": (0, -1), "down": (0, 1), "left": (-1, 0), "right": (1, 0)}


def transition(state, action):
    """A first guess: the player walks one cell in the named direction; nothing else moves."""
    player = get_entities_by_name(state, "Player")[0]
    way = action.split(" ")[-1]
    if way not in MOVES:
        return list(state)
    dx, dy = MOVES[way]
    out = [e for e in state if e.name != "Player"]
    out.append(Player(player.x + dx, player.y + dy))
    return out
