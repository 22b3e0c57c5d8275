def reward_func(state, action, next_state):
    """Reward 1 and the end of the episode when a toggle leaves a door open."""
    if action == "toggle" and any(d.is_open for d in get_entities_by_name(next_state, "Door")):
        return 1.0, True
    return 0.0, False
