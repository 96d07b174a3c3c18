"""The one spec grammar, `name[:positional][,key=value...]`, for every registry: parsing, typed options, derived
defaults, the older spellings, the errors (each naming the fix), and registries that fill themselves."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import lextra
from lextra.attention import build_mask
from lextra.attention.masks import MASKS
from lextra.cli.app import build_parser
from lextra.cli.training_options import train_config_from
from lextra.errors import ConfigError
from lextra.extend import EXTENSIONS, build_extension
from lextra.model import GPTConfig
from lextra.pipelines.compare import parse_variant
from lextra.pipelines.retrieval import parse_scaled_variant
from lextra.positions import SCHEMES, HeadDims, build_scheme, split_scheme_spec
from lextra.positions.scaling import SCALING_TYPES, RopeScaling, parse_rope_scaling
from lextra.registry import Registry, Spec, convert_value, format_spec, parse_spec
from lextra.tasks.registry import parse_task_spec

DIMS = HeadDims(2, 16, 32, 64)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("causal", Spec("causal")),
        ("window:256", Spec("window", "256")),
        ("window,width=256", Spec("window", None, {"width": "256"})),
        (" yarn:4,beta_fast=16 ", Spec("yarn", "4", {"beta_fast": "16"})),
        ("self_extend:group=8", Spec("self_extend", None, {"group": "8"})),  # the older NAME:key=value
        ("self_extend:group=8,window=512", Spec("self_extend", None, {"group": "8", "window": "512"})),
        (
            "longrope,short_factor=[1,2],long_factor=[3,4]",
            Spec("longrope", None, {"short_factor": "[1,2]", "long_factor": "[3,4]"}),
        ),
        ("ruler.vt:0.3", Spec("ruler.vt", "0.3")),
    ],
)
def test_parse_spec(text: str, expected: Spec) -> None:
    assert parse_spec(text) == expected


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "has no name"),
        (":4", "has no name"),
        ("window:", "nothing after ':'"),
        ("window,256", "expected key=value, got '256'"),
        ("window,width=", "expected key=value, got 'width='"),
        ("window,width=1,width=2", "sets 'width' twice"),
    ],
)
def test_malformed_specs_are_refused(text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_spec(text, "mask")


def test_values_convert_by_annotation() -> None:
    assert convert_value("4", "int") == 4 and convert_value("4", "float") == 4.0
    assert convert_value("none", "int | None") is None and convert_value("3", "int | None") == 3
    assert [convert_value(v, "bool") for v in ("true", "off", "1", "No")] == [True, False, True, False]
    assert convert_value("[1,2.5]", "tuple[float, ...] | None") == (1.0, 2.5)
    assert convert_value("interleaved", "str") == "interleaved"
    assert convert_value('{"type": "yarn"}', "dict | None") == {"type": "yarn"}
    for raw, annotation in (("4.5", "int"), ("maybe", "bool"), ("nan", "float"), ("x", "float | None")):
        with pytest.raises(ValueError):
            convert_value(raw, annotation)
    assert format_spec("window", {"width": 64}) == "window,width=64"
    assert format_spec("x", {"on": True, "f": (1.0, 2.0)}) == "x,on=true,f=[1.0,2.0]"


def test_masks_old_and_new_spellings_build_the_same_mask() -> None:
    assert build_mask("window:256").width == build_mask("window,width=256").width == 256
    assert build_mask("window", train_len=64).width == 64  # derived default: L_tr
    assert build_mask("bca", train_len=64).block == 32 and build_mask("bca:8").block == 8  # L_tr / 2
    assert build_mask("window:16", width=8).width == 8  # keyword options override the spec's
    assert repr(build_mask(None)) == "causal()"
    with pytest.raises(ConfigError, match="window needs a width: use 'window:W'"):
        build_mask("window")


def test_scalings_old_and_new_spellings() -> None:
    assert parse_rope_scaling("yarn:4") == {"rope_type": "yarn", "factor": 4.0}
    assert parse_rope_scaling("yarn:4,beta_fast=16") == {"rope_type": "yarn", "factor": 4.0, "beta_fast": 16.0}
    assert (
        parse_rope_scaling("linear,factor=2")
        == parse_rope_scaling("linear:2")
        == {"rope_type": "linear", "factor": 2.0}
    )
    assert parse_rope_scaling("yarn") == {"rope_type": "yarn", "factor": 1.0}
    assert parse_rope_scaling("none") == {"rope_type": "none"}
    assert parse_rope_scaling('{"type": "yarn", "factor": 4}') == {"type": "yarn", "factor": 4}  # JSON stays
    # a saved scaling's legacy "type" key reads as rope_type, as Hugging Face reads it
    assert RopeScaling(type="linear", factor=2) == RopeScaling(rope_type="linear", factor=2)
    # "pi" is linear: same value, same equality and hash, saved as "linear"
    assert parse_rope_scaling("pi:2") == {"rope_type": "linear", "factor": 2.0}
    assert RopeScaling("pi", factor=2) == RopeScaling("linear", factor=2.0)
    assert hash(RopeScaling("pi", factor=2)) == hash(RopeScaling("linear", factor=2))
    assert "pi" not in SCALING_TYPES.names() and "pi" in SCALING_TYPES
    scheme = build_scheme("rope", DIMS, scaling="yarn:4,truncate=false")  # a spec as the scheme's scaling option
    assert scheme.scaling == RopeScaling("yarn", factor=4.0, original_max_position_embeddings=64, truncate=False)
    with pytest.raises(ConfigError, match="factor must be >= 1"):
        RopeScaling(**parse_rope_scaling("linear:0.5"))


def test_extension_methods_old_and_new_spellings() -> None:
    old, new = build_extension("self_extend:group=8", 4096), build_extension("self_extend,group=8", 4096)
    assert old.options == new.options == {"group": 8, "window": 1024, "log_scale": False}
    assert build_extension("rerope,window=64,log_scale=off", 512).options == {"window": 64, "log_scale": False}


def test_task_specs_old_and_new_spellings() -> None:
    assert parse_task_spec("passkey+lm").ratio == 0.5  # the older spelling
    assert parse_task_spec("passkey:0.3") == parse_task_spec("passkey,ratio=0.3")
    spec = parse_task_spec("passkey:0.3,digits=7")
    assert (spec.name, spec.ratio, spec.options, spec.spec) == ("passkey", 0.3, {"digits": 7}, "passkey:0.3,digits=7")
    assert parse_task_spec("kv").spec == "kv"
    for bad, message in (
        ("passkey:0.3,ratio=0.2", "gives the ratio twice"),
        ("passkey,ratio=2", r"must be in \(0, 1\]"),
        ("passkey,colour=red", "has no option 'colour'; its options: digits, distractors"),
        ("passkey,digits=five", "digits takes an integer"),
        ("ruler.vt,hops=2", "takes no options of its own, got hops; drop them"),
    ):
        with pytest.raises(ConfigError, match=message):
            parse_task_spec(bad)


def test_scheme_specs_and_scheme_options() -> None:
    assert split_scheme_spec("rope,base=500000") == ("rope", {"base": 500000.0})
    config = GPTConfig(layer_plan="rope,base=500000,layout=interleaved")
    first = config.plan()[0]
    assert (first.scheme, first.scheme_options) == ("rope", {"base": 500000.0, "layout": "interleaved"})
    # --scheme-option K=V (scheme_options) still works and wins over the spec
    argv = ["train", "--scheme", "rope,base=500000", "--scheme-option", "base=100", "--out", "x"]
    assert train_config_from(build_parser().parse_args(argv)).model.plan()[0].scheme_options == {"base": 100.0}
    # a config stating `scheme` and `scheme_options` (a TOML file's) reads as the plan of that one variant
    later = GPTConfig.from_dict({"scheme": "rope,base=500", "scheme_options": {"layout": "interleaved"}}).plan()[0]
    assert (later.scheme, later.scheme_options) == ("rope", {"base": 500.0, "layout": "interleaved"})
    assert build_scheme("alibi,slope_shift=0.5", DIMS).options == {"slope_shift": 0.5}
    saved = GPTConfig(layer_plan="t5,num_buckets=16").to_dict()
    assert GPTConfig.from_dict(saved).plan()[0].scheme_options == {"num_buckets": 16}
    variant = parse_variant("rope,base=500+window:64")
    assert (variant.scheme, variant.mask) == ("rope,base=500", "window:64")
    assert parse_scaled_variant("rope+dynamic") == ("rope", "dynamic:1")
    assert parse_scaled_variant("rope+yarn,factor=4") == ("rope", "yarn,factor=4")
    with pytest.raises(ConfigError, match="unknown RoPE scaling 'yarm'"):
        parse_scaled_variant("rope+yarm:4")


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: build_mask("windw:4"), "unknown mask 'windw'; known masks: causal, window, bca, chunk, full"),
        (lambda: build_mask("window,w=4"), "mask 'window' has no option 'w'; its options: width"),
        (
            lambda: build_mask("window:abc"),
            "mask 'window': width takes an integer (int), got 'abc'; its options: width",
        ),
        (lambda: build_mask("causal:3"), "mask 'causal' takes no positional value, got '3'"),
        (lambda: build_mask("window:4,width=8"), "width is given twice"),
        (lambda: build_scheme("rope:4", DIMS), "position scheme 'rope' takes no positional value"),
        (lambda: build_scheme("rope,bse=4", DIMS), "has no option 'bse'; its options: base, layout, scaling"),
        (lambda: build_scheme("rope,base=big", DIMS), "base takes a number (float), got 'big'"),
        (lambda: build_extension("rerope:64", 512), "'rerope' takes no positional value, got '64'; set options as"),
        (lambda: build_extension("rerope,log_scale=maybe", 512), "log_scale takes true or false (bool)"),
        (lambda: parse_rope_scaling("yarn:x"), "RoPE scaling 'yarn': factor takes a number (float), got 'x'"),
        (lambda: parse_rope_scaling("none:2"), "RoPE scaling 'none' takes no positional value"),
        (lambda: parse_rope_scaling("yarm:4"), "unknown RoPE scaling 'yarm'; known RoPE scalings: none, linear, ntk"),
        (lambda: parse_rope_scaling("linear,beta_fast=3"), "'linear' has no option 'beta_fast'; its options: factor"),
        (lambda: parse_task_spec("needle"), "unknown training task 'needle' in 'needle'; `lextra list` shows"),
    ],
)
def test_spec_errors_name_the_problem_and_the_fix(build, message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        build()
    assert message in str(caught.value)


def test_describe_and_help_come_from_the_declarations() -> None:
    assert MASKS.help_text().startswith("causal, window[:WIDTH], bca[:BLOCK], chunk[:SIZE], full")  # then plugins'
    assert MASKS.usage("window") == "window[:WIDTH][,key=value...]" and MASKS.usage("causal") == "causal"
    assert MASKS.describe("bca") == "block=L_tr / 2" and MASKS.describe("full") == "no options"
    assert EXTENSIONS.describe("rerope") == "window=L/8, log_scale=True"
    assert SCHEMES.types_text("alibi") == "slope_shift: float, left: float"
    assert SCALING_TYPES.help_text().startswith("none, linear[:FACTOR], ntk[:FACTOR], dynamic[:FACTOR]")
    assert [o.name for o in SCALING_TYPES.options("llama3")] == [
        "factor",
        "original_max_position_embeddings",
        "low_freq_factor",
        "high_freq_factor",
    ]


def test_a_registry_imports_its_modules_on_first_lookup(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "spec_holder.py").write_text(
        "from lextra.registry import Registry\nTHINGS = Registry('thing', modules=('spec_fillers',))\n"
    )
    (tmp_path / "spec_fillers.py").write_text(
        "from spec_holder import THINGS\n\n@THINGS.register('late', aliases=('tardy',))\nclass Late:\n"
        "    positional = 'size'\n\n    def __init__(self, *, size: int = 1, fast: bool = False) -> None:\n"
        "        self.size, self.fast = size, fast\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    import spec_holder

    registry: Registry = spec_holder.THINGS
    assert "spec_fillers" not in sys.modules
    built = registry.build("tardy:3,fast=yes")
    assert (type(built).__name__, built.size, built.fast) == ("Late", 3, True)
    assert registry.names() == ["late"] and "spec_fillers" in sys.modules
    with pytest.raises(ValueError, match="registered twice"):
        registry.register("tardy")(type("Other", (), {}))


def test_training_on_a_task_works_in_a_fresh_interpreter(tmp_path: Path) -> None:
    """`lextra.train` alone: the task's batch sources register themselves on the first lookup."""
    code = f"""
import json
from lextra.model import GPTConfig
from lextra.train import TrainConfig, train
model = GPTConfig(n_layer=1, n_head=2, d_model=32, train_len=128)
config = TrainConfig(task="passkey,ratio=0.5", model=model, steps=2, batch_size=2, warmup=1, limit_chars=60000,
                     checkpoint_every=2, eval_sequences=0)
final = train(config, {str(tmp_path / "run")!r}, progress=False, device="cpu")
print(json.dumps({{"final": str(final)}}))
"""
    env = {"PYTHONPATH": str(Path(lextra.__file__).parent.parent), "OMP_NUM_THREADS": "1", "PATH": "/usr/bin:/bin"}
    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr
    final = Path(json.loads(result.stdout.strip().splitlines()[-1])["final"])
    assert (final / "config.json").exists()
    saved = json.loads((tmp_path / "run" / "config.json").read_text())
    assert saved["train"]["task"] == "passkey,ratio=0.5"


def test_ruler_task_lists_take_each_task_s_options() -> None:
    from lextra.pipelines.ruler import parse_task_list, parse_tasks, settings_from_section

    names, options = parse_task_list("niah_single_1,vt,hops=2,fewshot=false,niah_single_1")
    assert names == ["niah_single_1", "vt"] and options == {"vt": {"hops": 2, "fewshot": False}}
    assert parse_task_list("all")[0] == parse_tasks("all") and parse_tasks("vt,cwe") == ["vt", "cwe"]
    section = settings_from_section({"tasks": "vt,hops=3"})
    assert section.tasks == ["vt"] and section.options == {"vt": {"hops": 3}}
    for bad, message in (
        ("hops=2,vt", "comes before any task; write TASK,hops=2"),
        ("vt,hop=2", "RULER task 'vt' has no option 'hop'; its options: chains, hops"),
        ("vt,hops=two", "hops takes an integer"),
        ("vt,hops=2", "give them as RulerSettings.options"),
    ):
        with pytest.raises(ConfigError, match=message):
            parse_tasks(bad) if "RulerSettings" in message else parse_task_list(bad)


def test_a_class_that_leaves_an_abstract_method_undefined_is_not_registered() -> None:
    from lextra.data.positions import SAMPLERS, PositionSampler
    from lextra.positions.scaling import SCALING_TYPES, ScalingType

    with pytest.raises(TypeError, match=r"RoPE scaling 'half_done' leaves frequencies undefined"):
        SCALING_TYPES.register("half_done")(type("HalfDone", (ScalingType,), {}))
    with pytest.raises(TypeError, match=r"position sampler 'no_draw' leaves draw undefined"):
        SAMPLERS.register("no_draw")(type("NoDraw", (PositionSampler,), {}))
    assert "half_done" not in SCALING_TYPES.names() and "no_draw" not in SAMPLERS.names()


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        ("rope,base=500000;alibi", ["rope,base=500000", "alibi"]),
        ("rope,base=500000,alibi", ["rope,base=500000", "alibi"]),  # unambiguous with commas too
        ("rope,rope+bca,alibi+window:64", ["rope", "rope+bca", "alibi+window:64"]),
        (["rope,base=500000", "alibi"], ["rope,base=500000", "alibi"]),  # a repeated flag
        ('rope,scaling={"type": "yarn", "factor": 4};t5', ['rope,scaling={"type": "yarn", "factor": 4}', "t5"]),
        ('rope,scaling={"type":"yarn","factor":4},alibi', ['rope,scaling={"type":"yarn","factor":4}', "alibi"]),
        ("vt,hops=2,niah_single_1", ["vt,hops=2", "niah_single_1"]),
        (" ; rope ;", ["rope"]),
    ],
)
def test_spec_lists_split_at_semicolons_and_unambiguous_commas(values, expected) -> None:
    from lextra.registry import split_specs

    assert split_specs(values) == expected


def test_list_flags_are_repeatable_and_keep_json_whole() -> None:
    from lextra.cli.app import build_parser
    from lextra.pipelines.compare import parse_variant

    parser = build_parser(("compare",))
    a = parser.parse_args(["compare", "--out", "x", "--schemes", "rope,base=500000;alibi"])
    b = parser.parse_args(["compare", "--out", "x", "--scheme", "rope,base=500000", "--scheme", "alibi"])
    assert a.schemes == b.schemes == ["rope,base=500000", "alibi"]
    variant = parse_variant("rope,base=500000+window:64")
    assert (variant.scheme, variant.mask) == ("rope,base=500000", "window:64")
    with pytest.raises(ConfigError, match="unknown position scheme 'base=500000'"):
        parse_variant("base=500000")
    with pytest.raises(ConfigError, match="comes before any scheme; write SCHEME,base=1"):
        from lextra.registry import split_specs

        split_specs("base=1;rope", "scheme")
    # a JSON option inside a spec is read whole by the spec parser, then by the option's type
    assert SCHEMES.parse('rope,scaling={"type": "yarn", "factor": 4}')[1] == {"scaling": {"type": "yarn", "factor": 4}}


def test_scheme_options_are_typed_by_the_scheme() -> None:
    from lextra.cli.options import scheme_options

    assert scheme_options("rope,base=10", ["base=500000", "layout=interleaved"]) == {
        "base": 500000.0,
        "layout": "interleaved",
    }
    assert scheme_options("alibi", ["slope_shift=1", "slope_shift=2"]) == {"slope_shift": 2.0}  # the last wins
    for items, message in (
        (["slope_shift=nan"], "slope_shift takes a number"),
        (["slope=1"], "has no option 'slope'; its options: slope_shift"),
        (["slope_shift"], "must look like KEY=VALUE"),
    ):
        with pytest.raises(ConfigError, match=message):
            scheme_options("alibi", items)
