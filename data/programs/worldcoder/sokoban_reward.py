def reward_func(state, action, next_state):
    """-0.1 per step, +1 for each box newly on a target, -1 for each box pushed off, +10 once every target holds a box."""
    def on_targets(s):
        targets = {(e.x, e.y) for e in get_entities_by_name(s, "Target")}
        boxes = {(e.x, e.y) for e in get_entities_by_name(s, "Box")}
        return len(targets & boxes), bool(targets) and targets <= boxes
    before, _ = on_targets(state)
    after, solved = on_targets(next_state)
    reward = -0.1
    if after > before:
        reward += 1.0
    elif after < before:
        reward -= 1.0
    if solved:
        reward += 10.0
    return reward, solved
