def label(entity):
    """How commands name an entity: its type in lower case and its number, e.g. 'countertop 1'."""
    return f"{entity.name.lower()} {entity.x}"


def transition(state, action):
    """A first guess: "go to R" takes the agent to receptacle R; nothing else changes anything."""
    out = list(state)
    agent = get_entities_by_name(out, "Agent")[0]
    if action.startswith("go to "):
        where = action[len("go to "):]
        if any(label(e) == where for e in out):
            out[out.index(agent)] = Agent(agent.x, agent.y, **{**agent.fields(), "location": where})
    return out
