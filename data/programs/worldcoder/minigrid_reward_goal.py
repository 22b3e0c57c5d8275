def reward_func(state, action, next_state):
    """Reward 1 and the end of the episode when the agent reaches the goal square; lava ends it with 0."""
    agent = get_entities_by_name(next_state, "Agent")[0]
    here = [e.name for e in get_entities_by_position(next_state, agent.x, agent.y)]
    if "Goal" in here:
        return 1.0, True
    if "Lava" in here:
        return 0.0, True
    return 0.0, False
