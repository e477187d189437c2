"""The shape of a refused command: one line ``error: ...`` on stderr, the exit status,
never a traceback."""

from click.testing import CliRunner

from cli import main


def fails(args, *fragments, code=2):
    result = CliRunner().invoke(main, [str(a) for a in args])
    assert result.exit_code == code, (result.exit_code, result.output)
    assert not isinstance(result.exception, Exception) or isinstance(result.exception,
                                                                      SystemExit), result.exception
    err = result.stderr
    assert err.startswith("error: "), err
    assert len(err.splitlines()) == 1, err
    assert "Traceback" not in result.output
    for f in fragments:
        assert f in err, (f, err)
    return err


def invoke(*args):
    """The CLI run in-process on ``args`` (each turned to text)."""
    return CliRunner().invoke(main, [str(a) for a in args])


def one_error_line(result) -> str:
    """The single ``error:`` line of a refused command (exit 2)."""
    assert result.exit_code == 2, (result.exit_code, result.output)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    return lines[0]
