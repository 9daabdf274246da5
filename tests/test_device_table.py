"""The one device table (measure.device.BACKENDS): every row reaches settings' validation, s2st-serve's
--device parser, xdist's spreading and the one-line refusals, which name the choices the table gives."""
from __future__ import annotations

import pytest

from pytest_s2st.cli import serve
from pytest_s2st.distribute import worker_device
from pytest_s2st.errors import S2STError
from pytest_s2st.measure.device import AUTO, BACKENDS, CHOICES, CHOICES_TEXT, backend_of, parse_device, resolve_device
from pytest_s2st.settings import device_name

ROWS = sorted(BACKENDS)


def serve_device(value: str, capsys) -> str:
    """What s2st-serve's parser makes of --device: the value, or its one error line."""
    try:
        args = serve.build_parser().parse_args(["--demo-tone", "--port", "0", "--device", value])
    except SystemExit:
        err = capsys.readouterr().err.strip()
        assert "\n" not in err
        return err
    return args.device


def test_choices_are_auto_and_every_row():
    assert CHOICES == (AUTO, *BACKENDS)
    assert CHOICES_TEXT.startswith("auto, cpu, cuda, npu")  # a row added keeps these first: "auto" tries in order
    indexed = [name for name in BACKENDS if BACKENDS[name].indexed]
    assert CHOICES_TEXT == f"{', '.join(CHOICES)} ({'/'.join(indexed)} may take :N)"  # one line, every row once


@pytest.mark.parametrize("name", ROWS + [AUTO])
def test_every_row_is_accepted_by_settings_and_serve(name, capsys):
    assert parse_device(name) == (name, None)
    assert device_name(f" {name.upper()} ") == name
    assert serve_device(name, capsys) == name


@pytest.mark.parametrize("name", ROWS)
def test_an_index_is_taken_exactly_where_the_row_says(name, capsys):
    pinned = f"{name}:1"
    if BACKENDS[name].indexed:
        assert parse_device(pinned) == (name, 1) and device_name(pinned) == pinned
        assert serve_device(pinned, capsys) == pinned
        assert backend_of(pinned) is BACKENDS[name]
        assert worker_device(name, 3, lambda asked: 2) == f"{name}:1"  # xdist worker gw3 of 2 devices
    else:
        with pytest.raises(ValueError, match="must be one of"):
            device_name(pinned)
        assert CHOICES_TEXT in serve_device(pinned, capsys)
        assert worker_device(name, 3, lambda asked: 2) == name


@pytest.mark.parametrize("asked", ["tpu", "cuda:x", "cuda:²", "cuda:", "auto:0", ""])
def test_an_unknown_device_is_one_line_naming_the_choices(asked, capsys):
    with pytest.raises(ValueError) as settings_err:
        device_name(asked)
    assert str(settings_err.value) == f"must be one of {CHOICES_TEXT}, got {asked!r}"
    assert serve_device(asked, capsys) == (f"s2st-serve: error: argument --device: '{asked}': expected one of "
                                           f"{CHOICES_TEXT}")
    with pytest.raises(S2STError) as resolve_err:
        resolve_device(asked)
    assert str(resolve_err.value) == f"--s2st-device={asked}: expected one of {CHOICES_TEXT}"


def test_serve_help_lists_the_choices():
    assert " | ".join(CHOICES) in serve.build_parser().format_help()


def test_fairseq_places_models_only_where_the_row_says(tmp_path):
    pytest.importorskip("fairseq")
    from pytest_s2st.pipelines.fairseq_args import stage_namespace

    for name in ROWS:
        ns = stage_namespace({}, device=name, config_path=tmp_path / "c.yaml")
        assert ns.cpu is (not BACKENDS[name].fairseq)
