"""The ledger's own checks (tests/ha/ledger.py), on acknowledgements made up around one recorded
switchover: what they must flag and what they must let pass. They guard every HA campaign."""

from __future__ import annotations

from tests.ha.ledger import Ack, Ledger

OLD, NEW = "10.0.0.1:10911", "10.0.0.2:10911"
ELECTED = 1_000.0  # the record naming NEW (electedAt, whole milliseconds)


def _ledger(*acks: Ack) -> Ledger:
    ledger = Ledger()
    ledger.recorded(500.0, OLD, 1)
    ledger.recorded(ELECTED, NEW, 2)
    ledger.acks.extend(acks)
    return ledger


def _ack(address: str, sent_wall: float, received_wall: float, body: bytes = b"x") -> Ack:
    return Ack(body, "g0", 0, 0, address, sent=0.0, received=0.0, received_wall=received_wall, sent_wall=sent_wall)


def test_an_answer_from_the_replaced_master_to_a_request_sent_after_the_election_is_late():
    late = _ack(OLD, ELECTED + 0.01, ELECTED + 0.012)
    assert _ledger(late).acked_after_replaced() == [late]


def test_an_answer_in_flight_across_the_election_is_left_to_the_data_check():
    # sent before the record named NEW, received after: the old master may have answered before
    # its Fence; acked_by_fenced judges it if it is lost
    in_flight = _ack(OLD, ELECTED - 0.001, ELECTED + 0.001)
    ledger = _ledger(in_flight)
    assert ledger.acked_after_replaced() == []
    assert ledger.acked_by_fenced([in_flight]) == [in_flight]


def test_a_send_that_failed_over_to_the_new_master_passes():
    # first tried on OLD before the election, answered by NEW after it
    moved = _ack(NEW, ELECTED - 3.0, ELECTED + 0.5)
    assert _ledger(moved).acked_after_replaced() == []


def test_the_replaced_master_answering_long_after_the_election_is_late_whenever_the_batch_began():
    # a batch first sent before the election and tried again on OLD: its answer, seconds on, is no
    # answer in flight at the election
    again = _ack(OLD, ELECTED - 0.5, ELECTED + 3.0)
    assert _ledger(again).acked_after_replaced() == [again]


def test_the_millisecond_electedAt_drops_is_allowed_for():
    # electedAt 1000.000 may stand for 1000.0009: a request that left at 1000.0005 may have left first
    edge = _ack(OLD, ELECTED + 0.0005, ELECTED + 0.002)
    assert _ledger(edge).acked_after_replaced() == []
    assert _ledger(_ack(OLD, ELECTED + 0.0011, ELECTED + 0.002)).acked_after_replaced() != []


def test_answers_from_the_master_of_the_moment_pass():
    assert _ledger(_ack(OLD, 900.0, 900.002), _ack(NEW, 1_100.0, 1_100.002)).acked_after_replaced() == []
