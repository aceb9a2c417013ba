"""`rtroute bench publish --scenario`: the names the CLI offers are the benchmark's shapes."""
from __future__ import annotations

import pytest
from click.testing import CliRunner

from rtroute.bench import proxy, traffic
from rtroute.bench.commands import _chosen, bench_proxy, bench_publish
from rtroute.bench.publish import SCENARIOS, SHAPES, VARIED_SHAPES
from rtroute.routing.exchanges import RTopicExchange, TopicExchange


def test_every_shape_has_a_distinct_scenario_name_the_cli_offers():
    option = next(p for p in bench_publish.params if p.name == "scenarios")
    assert list(option.type.choices) == SCENARIOS + ["one-key", "varied"]
    assert SCENARIOS == [s.name for s in SHAPES + VARIED_SHAPES]
    assert len(set(SCENARIOS)) == len(SHAPES + VARIED_SHAPES) and all(SCENARIOS)
    option = next(p for p in bench_proxy.params if p.name == "scenarios")
    assert list(option.type.choices) == [s.name for s in proxy.SHAPES + VARIED_SHAPES] + \
        ["one-key", "varied"]


def test_scenario_groups_pick_shapes_in_the_table_order():
    assert _chosen(SHAPES, VARIED_SHAPES, ()) == SHAPES + VARIED_SHAPES
    assert _chosen(SHAPES, VARIED_SHAPES, ("varied",)) == VARIED_SHAPES
    assert _chosen(SHAPES, VARIED_SHAPES, ("mixed", "star")) == [SHAPES[1], VARIED_SHAPES[-1]]


@pytest.mark.parametrize("made", [traffic.varied_literal(300), traffic.varied_star(40),
                                  traffic.fanout(20), traffic.mixed()],
                         ids=["literal", "star", "fanout", "mixed"])
def test_each_key_reaches_the_same_queues_through_rtopic_and_the_topic_exchange(made):
    """What the bench compares must deliver the same copies on both sides: checked with the
    routing library (the fillers match none of the keys)."""
    rtopic, topic = RTopicExchange(), TopicExchange()
    for queue, key in made.rtopic_bindings:
        rtopic.bind(f"q{queue}", key)
    for queue, key in made.topic_bindings:
        topic.bind(f"q{queue}", key)
    rtopic.bind("filler", "s1.app2.mod3.w4")
    topic.bind("filler", "s1.app2.mod3.w4")
    step = max(1, len(made.rtopic_keys) // 200)
    for i in range(0, len(made.rtopic_keys), step):
        reached = rtopic.route(made.rtopic_keys[i]).destinations
        assert reached == topic.route(made.topic_keys[i]).destinations
        assert len(reached) == made.copies[i] and "filler" not in reached
    assert {q for q, _ in made.rtopic_bindings} == set(range(made.queues))
    assert made.total_copies(len(made.copies) + 1) == sum(made.copies) + made.copies[0]


def test_an_unknown_scenario_is_a_usage_error_naming_the_choices():
    result = CliRunner().invoke(bench_publish, ["--scenario", "stars"])
    assert result.exit_code == 2
    assert "'stars' is not one of" in result.output and "'star'" in result.output
