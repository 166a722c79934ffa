"""Commands built from a config dataclass (``pdbgym.commandapp.config_command``): every field is a flag
with the help and default declared on the field, the flag's special shapes (a negation, a one-sided flag,
a hidden old spelling, a range) hold, a field without help is refused, and ``--help`` stays plain."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Annotated

import pytest
import typer
from typer.testing import CliRunner

from pdbgym.commandapp import command_app, config_command, config_flags
from pdbgym.defaults import documented


@dataclasses.dataclass
class ToyConfig:
    out: Path = documented(help="where it goes")
    steps: int = documented(3, "optimizer steps")
    use_dora: bool = documented(True, "plain LoRA instead of DoRA", flag="--lora", negates=True)
    resume: bool = documented(False, "continue the run in --out", flag="--resume")
    context: int = documented(64, "tokens an episode", old_flags=("--ctx",))
    minutes: float = documented(0.0, "a cap in minutes (0: none)", min=0)
    name: str | None = documented(None, "a name")
    modules: tuple[str, ...] = documented(("q", "v"), "module names, comma-separated",
                                          text=(",".join, lambda text: tuple(text.split(","))))
    extra: dict = documented(help="library callers only", factory=dict, cli=False)

    def __post_init__(self) -> None:
        if self.steps < 1:
            raise ValueError(f"steps must be >= 1, got {self.steps}")


def _toy_app(made: list) -> typer.Typer:
    app = command_app()

    @config_command(ToyConfig)
    def toy(config: ToyConfig,
            json_out: Annotated[bool, typer.Option("--json", help="print JSON")] = False) -> None:
        """A toy command."""
        made.append((config, json_out))

    app.command("toy")(toy)
    app.command("other")(lambda: None)  # two commands: the group needs the name
    return app


def _run(*args: str) -> tuple[typer.testing.Result, list]:
    made: list = []
    result = CliRunner().invoke(_toy_app(made), ["toy", *args], env={"COLUMNS": "80"})
    return result, made


def test_no_flags_make_the_configs_defaults():
    result, made = _run("--out", "o")
    assert result.exit_code == 0, result.output
    assert made == [(ToyConfig(out=Path("o")), False)]


def test_each_special_shape_reaches_the_field():
    result, made = _run("--out", "o", "--lora", "--resume", "--ctx", "32", "--minutes", "1.5", "--name", "n",
                        "--steps", "5", "--modules", "k,o,v", "--json")
    assert result.exit_code == 0, result.output
    assert made == [(ToyConfig(out=Path("o"), steps=5, use_dora=False, resume=True, context=32, minutes=1.5,
                               name="n", modules=("k", "o", "v")), True)]
    # a value under the field's own spelling counts when the old one is not given
    assert _run("--out", "o", "--context", "16")[1][0][0].context == 16


@pytest.mark.parametrize("args, says", [(["--minutes", "-1"], "--minutes"), (["--no-resume"], "--no-resume"),
                                        (["--steps", "x"], "--steps"), ([], "--out")])
def test_a_bad_flag_is_refused_before_the_command_runs(args, says):
    result, made = _run(*([] if not args else ["--out", "o"]), *args)
    assert result.exit_code == 2 and says in result.output and made == []


def test_the_configs_own_check_refuses_a_value():
    result, made = _run("--out", "o", "--steps", "0")
    assert isinstance(result.exception, ValueError) and "steps must be >= 1" in str(result.exception)
    assert made == []


def test_help_shows_each_fields_help_and_default_and_hides_the_rest():
    result, _ = _run("--help")
    assert result.exit_code == 0
    text = " ".join(result.output.split())
    for spec in dataclasses.fields(ToyConfig):
        if spec.metadata["cli"]:
            assert spec.metadata["help"] in text, spec.name
    assert "--steps <int> optimizer steps [default: 3]" in text and "[default: q,v]" in text and "--lora plain LoRA instead of DoRA" in text
    assert "--resume continue" in text and "--no-resume" not in text and "--no-lora" not in text
    assert "--ctx" not in text and "--extra" not in text and "library callers only" not in text
    assert "<bool>" not in text and "--json print JSON" in text


def test_a_field_without_help_is_refused_naming_it():
    @dataclasses.dataclass
    class Undocumented:
        steps: int = documented(3, "optimizer steps")
        seed: int = 42

    with pytest.raises(TypeError, match=r"Undocumented\.seed has no help text"):
        config_flags(Undocumented)
    with pytest.raises(TypeError, match="help text is required"):
        documented(3)


def test_a_new_field_is_a_flag_with_no_second_declaration():
    @dataclasses.dataclass
    class Grown(ToyConfig):
        warmup: int = documented(7, "warm-up steps")

    made: list = []
    app = command_app()
    app.command("grown")(config_command(Grown)(lambda config: made.append(config)))
    app.command("other")(lambda: None)
    runner = CliRunner()
    assert "--warmup <int> warm-up steps [default: 7]" in " ".join(
        runner.invoke(app, ["grown", "--help"], env={"COLUMNS": "80"}).output.split())
    assert runner.invoke(app, ["grown", "--out", "o", "--warmup", "9"]).exit_code == 0 and made[0].warmup == 9


@dataclasses.dataclass(frozen=True)
class Sampling:
    temperature: float = documented(0.7, "sampling temperature")
    top_p: float = documented(1.0, "nucleus mass")
    turn_budget: int = documented(30, "tool calls an episode", old_flags=("--budget",))

    def __post_init__(self) -> None:
        if self.temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {self.temperature}")


@dataclasses.dataclass
class Nesting:
    out: Path = documented(help="where it goes")
    episode: Sampling = documented(Sampling(top_p=0.9, turn_budget=12), "the episodes",
                                   inner={"temperature": "student sampling temperature", "top_p": None})
    extra: Sampling = documented(help="made from its own defaults", factory=Sampling, inner={"temperature": None,
                                                                                             "turn_budget": None})


def _nesting_app(made: list) -> typer.Typer:
    app = command_app(invoke_without_command=True)

    @app.callback()
    @config_command(Nesting)
    def nesting(config: Nesting, ctx: typer.Context) -> None:
        made.append(config)

    app.command("sub")(lambda: made.append("sub"))
    return app


def test_a_nested_dataclass_is_flattened_into_its_fields_flags():
    made: list = []
    runner = CliRunner()
    result = runner.invoke(_nesting_app(made), ["--out", "o", "--temperature", "0.2", "--budget", "5"])
    assert result.exit_code == 0, result.output
    # a flag left out keeps the nested field's default value, not its class's: top_p 0.9 stays
    assert made == [Nesting(Path("o"), Sampling(0.2, 0.9, 5), Sampling())]
    assert [flag.field for flag in config_flags(Nesting)] == [
        ("out",), ("episode", "temperature"), ("episode", "turn_budget"), ("episode", "turn_budget"),
        ("extra", "top_p")]
    text = " ".join(runner.invoke(_nesting_app([]), ["--help"], env={"COLUMNS": "80"}).output.split())
    assert "--temperature <float> student sampling temperature [default: 0.7]" in text
    assert "--turn-budget <int> tool calls an episode [default: 12]" in text  # the nested default's value
    assert "--top-p <float> nucleus mass [default: 1.0]" in text  # extra's, from its class
    assert "--budget" not in text and "sampling temperature [" not in text.replace("student sampling", "")


def test_a_nested_fields_own_check_refuses_a_value_and_a_subcommand_skips_the_callbacks_config():
    made: list = []
    result = CliRunner().invoke(_nesting_app(made), ["--out", "o", "--temperature", "-1"])
    assert isinstance(result.exception, ValueError) and "temperature must be >= 0" in str(result.exception)
    assert made == []
    # the group's flags are its callback's: a subcommand runs without its config being made (nothing is refused)
    result = CliRunner().invoke(_nesting_app(made), ["--out", "o", "--temperature", "-1", "sub"])
    assert result.exit_code == 0, result.output
    assert made == ["sub"]
