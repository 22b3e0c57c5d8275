def reward_func(state, action, next_state):
    """What the data shows so far: no step gives a reward and none ends the episode."""
    return 0.0, False
