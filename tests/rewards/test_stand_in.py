"""The attacker library as a host service: the host computes and records every call; its parser never raises."""

from hypothesis import given, settings
from hypothesis import strategies as st

from dgrpo.rewards import stand_in
from dgrpo.rewards.sandbox import LibraryCall, SandboxLimits, run_python
from dgrpo.rewards.stand_in import MAX_BITS, MAX_CALLS, MAX_LINE, LibraryService, compute

LIMITS = SandboxLimits(timeout_s=20)


def test_requests_are_answered_and_recorded():
    service = LibraryService(["thief_math"])
    replies = service.feed(b"1 thief_math add i3 i4\n2 thief_math div i7 i2\n3 thief_math pow f0x1.8p+1 i2\n")
    assert replies == b"1 ok i7\n2 ok f0x1.c000000000000p+1\n3 ok f0x1.2000000000000p+3\n"  # 7, 3.5 (1.75 * 2), 3.0 ** 2 = 9.0 (1.125 * 8)
    assert service.calls == [LibraryCall("thief_math", "add", (3, 4)), LibraryCall("thief_math", "div", (7, 2)),
                             LibraryCall("thief_math", "pow", (3.0, 2))]
    assert not service.garbled and not service.full


def test_a_request_split_across_reads_is_one_request():
    service = LibraryService(["thief_math"])
    assert service.feed(b"7 thief_math mu") == b""
    assert service.feed(b"l i6 i7\n") == b"7 ok i42\n"


def test_errors_are_named_not_raised():
    service = LibraryService(["thief_math"])
    replies = service.feed(b"1 thief_math div i1 i0\n2 thief_math pow i2 i100000\n3 thief_math gcd f0x1p+0 i2\n"
                           b"4 thief_math pow i-8 f0x1p-1\n5 thief_math mul f0x1p+1023 f0x1p+1023\n")
    # 1/0; 2**100000 has 100,001 bits > MAX_BITS; gcd of a float; (-8) ** 0.5 is complex; 2^2046 is inf
    assert replies == (b"1 err ZeroDivisionError\n2 err OverflowError\n3 err TypeError\n4 err ValueError\n"
                       b"5 ok finf\n")
    assert len(service.calls) == 5  # a call that raised was still a call


def test_results_stay_under_the_bit_bound():
    assert compute("pow", 2, MAX_BITS - 1) == 2 ** (MAX_BITS - 1)  # MAX_BITS bits: the largest allowed
    for function, a, b in (("pow", 3, MAX_BITS), ("mul", 1 << MAX_BITS, 2), ("lcm", (1 << 7000) + 1, (1 << 7000) + 3)):
        try:
            compute(function, a, b)
            raise AssertionError(f"{function} should overflow")
        except OverflowError:
            pass


def test_garbage_marks_the_record_and_gets_no_answer():
    for garbage in (b"[" * 50_000 + b"\n", b"1 thief_math add 3 4\n", b"1 other_math add i3 i4\n",
                    b"1 thief_math system i3 i4\n", b"\xff\xfe\n", b"1 thief_math add i3 i4 i5\n"):
        service = LibraryService(["thief_math"])
        assert service.feed(garbage) == b"" and service.garbled and service.calls == []


def test_an_over_long_line_is_skipped_and_the_next_request_answered():
    service = LibraryService(["thief_math"])
    assert service.feed(b"x" * (MAX_LINE + 10)) == b""  # no newline yet: dropped, skipping to the next one
    assert service.feed(b"y" * MAX_LINE + b"\n1 thief_math sub i5 i2\n") == b"1 ok i3\n"
    assert service.garbled and service.calls == [LibraryCall("thief_math", "sub", (5, 2))]


def test_a_flood_fills_the_service_and_stops_it():
    service = LibraryService(["thief_math"])
    service.feed(b"1 thief_math add i1 i1\n" * (MAX_CALLS + 5))
    assert service.full and len(service.calls) == MAX_CALLS
    service = LibraryService(["thief_math"])
    service.feed(b"z" * (stand_in.MAX_REQUEST_BYTES + 1))
    assert service.full and service.garbled


@settings(max_examples=300, deadline=None)
@given(st.lists(st.binary(max_size=300), max_size=20))
def test_the_parser_never_raises_and_answers_in_lines(chunks):
    service = LibraryService(["thief_math"])
    for chunk in chunks:
        replies = service.feed(chunk)
        assert replies == b"" or replies.endswith(b"\n")
    assert all(call.module == "thief_math" for call in service.calls)


def test_every_way_of_calling_the_library_is_recorded():
    """What the static check cannot see (a star import, a name built at run time, exec) reaches the host."""
    programs = {
        "attribute": "import thief_math\nprint(thief_math.add(2, 3))",
        "star_import": "from thief_math import *\nprint(add(2, 3))",
        "built_name": "m = __import__('thief_' + 'math')\nprint(getattr(m, 'a' + 'dd')(2, 3))",
        "exec": "ns = {}\nexec('import thief_math as t\\nr = t.add(2, 3)', ns)\nprint(ns['r'])",
        "importlib": "import importlib\nprint(importlib.import_module('thief_math').add(2, 3))",
        # a request written by hand on whichever descriptor takes it: the protocol is the library
        "by_hand": "import os\nfor fd in range(3, 64):\n    try:\n        os.write(fd, b'1 thief_math add i2 i3\\n')\n"
                   "    except OSError:\n        pass\nprint(5)",
    }
    for name, program in programs.items():
        result = run_python(program, LIMITS, ("thief_math",))
        assert result.ok and result.stdout == "5\n", (name, result.stderr[-300:])
        assert result.calls == (LibraryCall("thief_math", "add", (2, 3)),), name


def test_no_value_without_a_recorded_call():
    """Closing or re-pointing the library's pipes, or flooding them, leaves the program without a value."""
    stand_in_fds = "import thief_math\n"
    for attack in ("import os\nfor fd in range(3, 64):\n    try:\n        os.close(fd)\n    except OSError:\n        pass",
                   "import os\nfor fd in range(3, 64):\n    try:\n        os.write(fd, b'z' * 70000)\n    except OSError:\n        pass"):
        result = run_python(stand_in_fds + attack + "\nprint(thief_math.add(2, 3))", SandboxLimits(timeout_s=3),
                            ("thief_math",))
        assert not result.ok and "5" not in result.stdout, result.stdout
        assert result.calls == ()  # nothing answered, nothing recorded: and no value came back
    assert result.calls_garbled  # the flood: which the ASR counts as a call
