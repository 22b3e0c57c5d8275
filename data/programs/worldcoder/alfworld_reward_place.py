# the goal: how many objects of which type, with which property, in which receptacle type
GOAL = dict(obj="{obj}", recep="{recep}", flag={flag}, count={count})


def reward_func(state, action, next_state):
    """Reward 1 and the end of the episode once {count} {obj}(s){flag_text} lie in one {recep}."""
    per_receptacle = dict()
    for e in next_state:
        where = getattr(e, "receptacle", None)
        if e.name.lower() != GOAL["obj"] or where is None or where.split(" ")[0] != GOAL["recep"]:
            continue
        if GOAL["flag"] and not getattr(e, GOAL["flag"], False):
            continue
        per_receptacle[where] = per_receptacle.get(where, 0) + 1
    if any(n >= GOAL["count"] for n in per_receptacle.values()):
        return 1.0, True
    return 0.0, False
