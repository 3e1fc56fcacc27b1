"""`dgrpo keys`: refuses to overwrite a deployment's keys and sizes beyond swarm.nodes' bounds."""

from dgrpo.cli import main


def test_keys_never_overwrite_and_are_bounded(tmp_path, capsys):
    out = tmp_path / "keys"
    assert main(["keys", "3", "--out", str(out)]) == 0
    roster = (out / "roster.json").read_text()
    assert main(["keys", "3", "--out", str(out)]) == 2
    assert "already holds roster.json" in capsys.readouterr().err
    assert (out / "roster.json").read_text() == roster  # the first keys are intact
    assert main(["keys", "100000000", "--out", str(tmp_path / "big")]) == 2
    assert "1 to 1024" in capsys.readouterr().err and not (tmp_path / "big").exists()
