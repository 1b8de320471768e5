"""Console tables: full width when stdout is not a terminal (never a cut header), TSV with
``--plain``."""

from __future__ import annotations

from conftest import run_cli

from ctxleak.report import console

ROWS = [{f"expected influence column {i}": 0.123456 * i for i in range(12)},
        {f"expected influence column {i}": None for i in range(12)}]


def test_wide_table_is_not_cut_when_stdout_is_not_a_terminal(capsys):
    console.print_rows(ROWS, title="a wide table")
    out = capsys.readouterr().out
    assert "…" not in out
    for i in range(12):
        assert f"expected influence column {i}" in out
    header = next(line for line in out.splitlines() if "column 0" in line)
    assert len(header) > 300  # one line, at its natural width


def test_a_title_wider_than_its_table_stays_on_one_line_when_piped(capsys):
    title = "Algorithm 3: temperature for each target ε  (δ=1e-05, N_gen=50, T_max=40)"
    console.print_rows([{"a": 1, "b": 2}], title=title)
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == title and lines[1].split() == ["a", "b"]


def test_plain_prints_tsv(capsys):
    console.print_rows(ROWS, title="t", plain=True)
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "# t"
    assert lines[1].split("\t") == [f"expected influence column {i}" for i in range(12)]
    assert lines[2].split("\t")[:3] == ["0", "0.1235", "0.2469"]
    assert lines[3].split("\t") == ["—"] * 12 and len(lines) == 4


def test_tsv_cells_never_break_lines():
    from rich.table import Table

    table = Table()
    table.add_column("a\tb")
    table.add_row("x\ny")
    assert console.table_tsv(table) == "a b\nx y"


def test_cli_plain_flag(capsys):
    code, out, err = run_cli(["--plain", "models"], capsys)
    assert code == 0, err
    header = out.splitlines()[1] if out.startswith("#") else out.splitlines()[0]
    assert "\t" in header and "│" not in out and "┃" not in out


def test_the_control_cost_says_when_it_counts_only_this_process():
    """A resumed run measured 2 of its 8 responses in this process: the control's cost line
    says so, rather than read as the cost of all 8; a run measured whole says nothing more."""
    from ctxleak.report.influence import control_lines

    cost = {"forward_passes": 4, "examples": 2, "seconds": 1.5, "share_of_measure_time": 0.5}
    summaries = [{"n": 8, "control": {"enabled": False, "reason": "x", "cost": cost}}]
    line = control_lines(summaries)[-1]
    assert line.startswith("control cost: 4 extra forward passes for 2 responses of the 8 "
                           "(those this process measured), 1.5 s")
    whole = [{"n": 2, "control": {"enabled": False, "reason": "x", "cost": cost}}]
    assert control_lines(whole)[-1] == ("control cost: 4 extra forward passes for 2 responses, "
                                        "1.5 s, 50.0% of the measuring time")
