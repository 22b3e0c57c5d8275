MOVES = {"up": (0, -1), "down": (0, 1), "left": (-1, 0), "right": (1, 0)}


def transition(state, action):
    """Sokoban: the player moves or pushes one box; walls and other boxes block; a pair of free teleporters warps the player."""
    player = get_entities_by_name(state, "Player")[0]
    walls = {(e.x, e.y) for e in get_entities_by_name(state, "Wall")}
    boxes = {(e.x, e.y) for e in get_entities_by_name(state, "Box")}
    verb, _, way = action.partition(" ")
    if way not in MOVES:
        return list(state)
    dx, dy = MOVES[way]
    ahead = (player.x + dx, player.y + dy)
    if ahead in walls:
        return list(state)
    if ahead in boxes:
        beyond = (ahead[0] + dx, ahead[1] + dy)
        if verb != "push" or beyond in walls or beyond in boxes:
            return list(state)
        boxes = (boxes - {ahead}) | {beyond}
    gates = sorted((e.x, e.y) for e in get_entities_by_name(state, "Teleporter"))
    if len(gates) == 2 and ahead in gates and not (set(gates) & boxes):
        ahead = gates[1] if ahead == gates[0] else gates[0]
    out = [e for e in state if e.name not in ("Player", "Box")]
    out += [Box(x, y) for x, y in sorted(boxes)]
    out.append(Player(ahead[0], ahead[1]))
    return out
