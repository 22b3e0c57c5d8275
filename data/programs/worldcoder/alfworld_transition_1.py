import re


def label(entity):
    """How commands name an entity: its type in lower case and its number, e.g. 'countertop 1'."""
    return f"{entity.name.lower()} {entity.x}"


def changed(entity, **fields):
    """A copy of `entity` with some fields replaced."""
    return type(entity)(entity.x, entity.y, **{**entity.fields(), **fields})


def reachable(receptacle):
    """Objects in a receptacle can be taken or put only when it is open (or cannot be closed)."""
    return getattr(receptacle, "is_open", True)


def transition(state, action):
    """Walking, opening and closing receptacles, taking an object and moving (putting) it.

    "go to R" moves the agent to R; "open R" / "close R" at R; "take O from R" at R with empty hands;
    "move O to R" at R holding O. Any other command, or one whose conditions fail, changes nothing."""
    out = list(state)
    by_label = {label(e): e for e in out}
    agent = get_entities_by_name(out, "Agent")[0]
    here = agent.location

    def put(old, new):
        out[out.index(old)] = new

    m = re.fullmatch(r"go to (.+)", action)
    if m and m[1] in by_label:
        put(agent, changed(agent, location=m[1]))
    m = re.fullmatch(r"(open|close) (.+)", action)
    if m and m[2] == here and hasattr(by_label[here], "is_open"):
        put(by_label[here], changed(by_label[here], is_open=m[1] == "open"))
    m = re.fullmatch(r"take (.+) from (.+)", action)
    if m and m[2] == here and m[1] in by_label and agent.holding is None:
        obj = by_label[m[1]]
        if obj.receptacle == here and reachable(by_label[here]):
            put(obj, changed(obj, receptacle=None))
            put(agent, changed(agent, holding=m[1]))
    m = re.fullmatch(r"move (.+) to (.+)", action)
    if m and m[2] == here and agent.holding == m[1] and reachable(by_label[here]):
        put(by_label[m[1]], changed(by_label[m[1]], receptacle=here))
        put(agent, changed(agent, holding=None))
    return out
