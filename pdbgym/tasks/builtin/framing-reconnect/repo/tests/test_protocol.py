from framing import Command, Session


def test_commands_and_errors_are_collected():
    session = Session()
    session.received(b"HELLO id=7\nMETRIC cpu=0.5 host=a\nPING\nEVENT =x\n")
    assert session.commands == [Command("HELLO", {"id": "7"}), Command("METRIC", {"cpu": "0.5", "host": "a"})]
    assert session.errors == [
        "unknown verb 'PING'; expected one of BYE, EVENT, HELLO, METRIC",
        "argument '=x' is not key=value",
    ]


def test_reconnect_after_a_line_cut_short():
    session = Session()
    session.received(b"HELLO id=7\nMETRIC cpu=0.")
    session.reconnected()
    session.received(b"HELLO id=7\n")
    assert [c.verb for c in session.commands] == ["HELLO", "HELLO"]


def test_reconnect_while_an_over_long_line_was_arriving():
    session = Session(max_line=64)
    session.received(b"HELLO id=7\nEVENT trace=" + b"f" * 100)
    session.reconnected()
    session.received(b"HELLO id=7\nMETRIC cpu=0.25\n")
    assert [c.verb for c in session.commands] == ["HELLO", "HELLO", "METRIC"]
