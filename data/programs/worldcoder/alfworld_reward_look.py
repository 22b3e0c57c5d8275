GOAL = dict(obj="{obj}", lamp="{toggle}")   # hold this object where a lamp of this type is on


def reward_func(state, action, next_state):
    """Reward 1 and the end of the episode when the agent holds a {obj} next to a {toggle} that is on."""
    agent = get_entities_by_name(next_state, "Agent")[0]
    held = agent.holding is not None and agent.holding.split(" ")[0] == GOAL["obj"]
    lit = any(e.name.lower() == GOAL["lamp"] and e.is_on and e.receptacle == agent.location
              for e in next_state)
    if held and lit:
        return 1.0, True
    return 0.0, False
