"""The proxy's meter of a client's broker work in flight (rtroute.proxy.confirm_meter): what it
lets through, what it gives back to the client, against a plain model of RabbitMQ's numbering."""
from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rtroute.proxy.confirm_meter import ConfirmMeter


def test_the_budget_stops_reading_and_confirms_make_room():
    meter = ConfirmMeter(budget=250)
    meter.selected_by_proxy(1)
    assert meter.room(101) == 2
    meter.published(1, cost=101)
    meter.published(1, cost=101)
    assert not meter.full
    assert meter.room(101) == 1  # at least one while under the budget
    meter.published(1, cost=101)
    assert meter.full and meter.room(1) == 0
    assert meter.confirmed(1, 2, multiple=True) is None  # the client did not ask: swallowed
    assert meter.in_flight == 101 and not meter.full


def test_one_publish_passes_whatever_it_costs_when_nothing_is_in_flight():
    meter = ConfirmMeter(budget=10)
    meter.selected_by_proxy(1)
    assert meter.room(1000) == 1


def test_a_client_that_asks_for_confirms_later_gets_its_own_numbering():
    meter = ConfirmMeter(budget=1000)
    meter.selected_by_proxy(3)
    meter.published(3, cost=5, count=4)  # broker tags 1-4, unconfirmed for the client
    meter.published(3)  # a publish to a plain exchange: numbered, not metered
    meter.selected_by_client(3)  # the client's confirm.select: its tag 1 is the broker's 6
    meter.published(3, cost=5, count=2)  # broker 6, 7 = client 1, 2
    assert meter.confirmed(3, 5, multiple=True) is None
    assert meter.in_flight == 10
    assert meter.confirmed(3, 7, multiple=False) == 2
    assert meter.confirmed(3, 6, multiple=False) == 1
    assert meter.in_flight == 0


def test_a_client_in_confirm_mode_from_the_start_keeps_the_brokers_tags():
    meter = ConfirmMeter()
    meter.selected_by_client(1)
    assert not meter.needs_select(1)
    meter.published(1, cost=3, count=3)
    assert meter.confirmed(1, 2, multiple=True) == 2
    assert meter.in_flight == 3
    assert meter.confirmed(9, 7, multiple=False) == 7  # a channel not counted: as it is


def test_transactions_and_confirms():
    meter = ConfirmMeter()
    assert meter.tx_select(1)  # before any publish: a transaction channel, never selected
    assert not meter.needs_select(1)
    meter.selected_by_proxy(2)
    assert not meter.tx_select(2)  # the proxy selected confirms: refused with TX_REFUSED
    meter.selected_by_client(4)
    assert meter.tx_select(4)  # the client's own confirm mode: the broker refuses, as always
    meter.reset(1)
    assert meter.needs_select(1)  # opened again: a new channel


def test_a_closed_channel_leaves_the_budget_and_its_late_confirms_are_swallowed():
    meter = ConfirmMeter(budget=100)
    meter.selected_by_client(1)
    meter.published(1, cost=60, count=2)
    assert meter.full
    meter.closed(1)
    assert meter.in_flight == 0
    assert meter.confirmed(1, 2, multiple=True) is None
    assert meter.in_flight == 0
    meter.reset(1)
    assert 1 not in meter.channels


def test_a_budget_below_one_is_refused():
    with pytest.raises(ValueError, match="at least 1"):
        ConfirmMeter(budget=0)


@given(st.data())
def test_against_a_model_of_the_brokers_numbering(data):
    """Random publishes (metered or not), the client's confirm.select at a random point, and
    the broker's confirms in random order (single or multiple): the cost in flight is always
    that of the unconfirmed metered publishes, and the client gets exactly its own tags."""
    meter = ConfirmMeter(budget=10**9)
    meter.selected_by_proxy(1)
    publishes = data.draw(st.lists(st.integers(0, 7), min_size=1, max_size=40))
    select_at = data.draw(st.integers(0, len(publishes)))
    costs: dict[int, int] = {}
    for index, cost in enumerate(publishes, start=1):
        if index - 1 == select_at:
            meter.selected_by_client(1)
        meter.published(1, cost=cost)
        costs[index] = cost
    if select_at == len(publishes):
        meter.selected_by_client(1)
    unconfirmed = set(costs)
    while unconfirmed:
        tag = data.draw(st.sampled_from(sorted(unconfirmed)))
        multiple = data.draw(st.booleans())
        settled = {t for t in unconfirmed if t <= tag} if multiple else {tag}
        unconfirmed -= settled
        given_tag = meter.confirmed(1, tag, multiple)
        expected = tag - select_at if tag > select_at else None
        assert given_tag == expected
        assert meter.in_flight == sum(costs[t] for t in unconfirmed)
