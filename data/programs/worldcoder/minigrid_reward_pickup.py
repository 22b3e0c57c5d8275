TARGET = ("{kind}", "{color}")   # the object the mission asks for: (type, color)


def reward_func(state, action, next_state):
    """Reward 1 and the end of the episode when the agent picks up the {color} {kind}."""
    carrying = get_entities_by_name(next_state, "Agent")[0].carrying
    if action == "pick up" and carrying is not None and (carrying.name, carrying.color) == TARGET:
        return 1.0, True
    return 0.0, False
