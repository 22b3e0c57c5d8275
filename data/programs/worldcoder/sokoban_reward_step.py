def reward_func(state, action, next_state):
    """What the data shows so far: every step costs 0.1 and none ends the episode."""
    return -0.1, False
