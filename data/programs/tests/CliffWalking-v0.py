"""Stand-in behavioural tests of CliffWalking-v0, written by hand from its description for the provider test double
(cwm_nb.testing.capable_model). The last test is wrong on purpose (the cliff sends the player back to the start
without ending the episode), so the real environment drops it."""

def test_cliff_sends_player_back_to_start(Environment):
    env = Environment(); env.set_state(36)
    next_state, reward, done = env.step(1)
    assert (next_state, reward, done) == (36, -100, False)

def test_a_step_costs_one(Environment):
    env = Environment(); env.set_state(24)
    assert env.step(0)[:2] == [12, -1]

def test_reaching_the_goal_ends_episode(Environment):
    env = Environment(); env.set_state(35)
    next_state, reward, done = env.step(2)
    assert next_state == 47 and done

def test_the_edge_keeps_the_player(Environment):
    env = Environment(); env.set_state(0)
    assert env.step(0)[0] == 0

def test_cliff_ends_episode(Environment):
    env = Environment(); env.set_state(36)
    assert env.step(1)[2], "falling off the cliff should end the episode"
