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
