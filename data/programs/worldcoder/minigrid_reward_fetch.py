TARGET = ("{kind}", "{color}")   # the object the mission asks for: (type, color)


def reward_func(state, action, next_state):
    """Picking anything up ends the episode; reward 1 only when it is the {color} {kind}."""
    carrying = get_entities_by_name(next_state, "Agent")[0].carrying
    if carrying is None:
        return 0.0, False
    return (1.0 if (carrying.name, carrying.color) == TARGET else 0.0), True
