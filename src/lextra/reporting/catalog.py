"""What `lextra list` prints and the CLI help lines that name registered classes, all generated from the
registries (position schemes, masks, RoPE scalings, extension methods, position samplers, retrieval, RULER and
BABILong tasks), so a class a plugin registers shows up everywhere with its spec syntax and options."""

from __future__ import annotations

from lextra.attention.masks import MASKS
from lextra.attention.pieces import PIECES
from lextra.attention.plan import PRESETS
from lextra.data.positions import SAMPLERS
from lextra.evaluate.babilong import BABILONG_TASKS
from lextra.extend import EXTENSIONS
from lextra.positions import SCHEMES
from lextra.positions.logn import log_scaling_names
from lextra.positions.scaling import SCALING_TYPES
from lextra.registry import Registry
from lextra.tasks import AlgorithmicTask
from lextra.tasks.registry import TRAINING_TASKS
from lextra.tasks.retrieval import TASKS
from lextra.tasks.ruler import RULER_TASKS

GRAMMAR = "name[:positional][,key=value...]"


def _section(title: str, registry: Registry, names: list[str] | None = None) -> list[str]:
    lines = [title]
    names = registry.names() if names is None else names
    width = max((len(n) for n in names), default=0)
    for name in names:
        cls = registry.get(name)
        lines.append(f"  {name:<{width}}  {cls.summary}")
        if isinstance(cls, type) and issubclass(cls, AlgorithmicTask):
            lines.append(
                f"  {'':<{width}}    {cls.style} style, {cls.score.replace('_', '-')} score; lengths "
                f"{cls.train_lengths.text()} in training, {cls.test_lengths.text()} at test; {cls.suite.paper}"
            )
        lines.append(f"  {'':<{width}}    options: {registry.describe(name)}")
        types = registry.types_text(name)
        lines.append(f"  {'':<{width}}    spec: {registry.usage(name)}" + (f" ({types})" if types else ""))
    return lines


def sections() -> list[tuple[str, Registry]]:
    """The registries `lextra list` shows, each with the flag that takes its specs."""
    return [
        ("position schemes (--scheme SPEC, e.g. rope,base=500000; or --scheme-option KEY=VALUE)", SCHEMES),
        ("masks (--mask SPEC, e.g. window:256 or window,width=256)", MASKS),
        (
            "RoPE scalings of rotary models (--rope-scaling SPEC, e.g. yarn:4,beta_fast=16; or a JSON dict)",
            SCALING_TYPES,
        ),
        (
            "training-free extension methods of rotary models, L = the training length "
            "(--extend SPEC, e.g. self_extend,group=8)",
            EXTENSIONS,
        ),
        (
            "position samplers of the training windows, L_tr = the training length "
            "(lextra train / lextra hf finetune --positions SPEC, e.g. pose:32768 or randomized,max=2048)",
            SAMPLERS,
        ),
        (
            "retrieval tasks (--task SPEC: NAME[:RATIO][,ratio=R][,option=value...], e.g. passkey:0.3; NAME+lm = 0.5)",
            TASKS,
        ),
        ("RULER tasks (lextra ruler ... --tasks SPEC;SPEC..., repeatable, e.g. niah_single_1;vt,hops=2)", RULER_TASKS),
        (
            "BABILong tasks (lextra babilong ... --tasks SPEC;SPEC..., repeatable, e.g. qa1;qa2,facts=20)",
            BABILONG_TASKS,
        ),
        (
            "attention pieces of a layer plan (--layer-plan: SCHEME[+MASK][+PIECE...] per layer, ';' between layers, "
            "N*(...) repeats, e.g. '3*(rope,base=10000+window:1024+qknorm);rope,base=1000000+sinks')",
            PIECES,
        ),
    ]


def catalog_text() -> str:
    """The text `lextra list` prints: every registered class with its spec syntax, summary and options."""
    lines = [f"every spec reads {GRAMMAR}; a bare positional sets the option named in capitals", ""]
    for index, (title, registry) in enumerate(sections()):
        if index:
            lines.append("")
        lines += _section(f"{title}:", registry)
    tasks = [n for n in TRAINING_TASKS.names() if issubclass(TRAINING_TASKS.get(n), AlgorithmicTask)]
    title = (
        "length-generalization tasks (lextra train --task SPEC, lextra tasks eval, study tasks = [...]; "
        "e.g. ruoss.reverse_string or mqar,shift=gaps):"
    )
    return "\n".join([*lines, "", *_section(title, TRAINING_TASKS, tasks), "", *preset_lines(), "", *embedding_lines()])


def embedding_lines() -> list[str]:
    """The model's token-level position embeddings beside its scheme: Abacus (`lextra.positions.abacus`)."""
    from lextra.positions.abacus import ABACUS_MAX_K, ABACUS_POSITIONS

    return [
        "digit embeddings of the model (lextra train --abacus MAX_K, or [model] abacus = {max_k, positions, digits}):",
        "  abacus   Abacus (McLeish 2024): each digit's place in its number, shifted by a random 0..max_k in training",
        f"             options: max_k={ABACUS_MAX_K}, positions={ABACUS_POSITIONS}, digits=the task's or tokenizer's",
    ]


def preset_lines() -> list[str]:
    """The layer-plan presets (--layer-plan NAME[,option=value...]) with their summaries, options and plans."""
    lines = ["layer plan presets (--layer-plan NAME[,option=value...], e.g. gemma3,window=64):"]
    width = max(len(name) for name in PRESETS)
    for name, preset in PRESETS.items():
        options = ", ".join(f"{key}={value}" for key, value in preset.defaults.items())
        lines.append(f"  {name:<{width}}  {preset.summary}")
        lines.append(f"  {'':<{width}}    options: {options}")
        lines.append(f"  {'':<{width}}    plan: {preset.template}")
    return lines


def mask_help() -> str:
    return f"inference mask: {MASKS.help_text()} (see `lextra list`)"


def sampler_help() -> str:
    return f"position sampler of the training windows: {SAMPLERS.help_text()} (options: `lextra list`)"


def scheme_help() -> str:
    return f"position scheme spec, e.g. rope,base=500000: {SCHEMES.help_text()} (see `lextra list`)"


def scaling_help() -> str:
    aliases = "".join(f", {alias} = {name}" for alias, name in SCALING_TYPES.aliases().items())
    return (
        f"RoPE frequency scaling for rotary models, TYPE[:FACTOR][,key=value...] (e.g. yarn:4,beta_fast=16) or a JSON "
        f"rope_parameters object; TYPE: {SCALING_TYPES.help_text()}{aliases} (see `lextra list`)"
    )


def log_scaling_help() -> str:
    """The `--log-scaling` help line: the scalings that apply at inference (a learned one needs training)."""
    names = ", ".join(log_scaling_names(inference=True))
    return f"log-n scaling of the logits: {names} (default: none; ssmax is learned: train a plan with logn:ssmax)"


def extension_help() -> str:
    return (
        f"training-free extension method for rotary models, NAME[,key=value...] (e.g. rerope,window=512): "
        f"{EXTENSIONS.help_text()} (options: `lextra list`); combines with --rope-scaling (the method rotates "
        "with the scaled frequencies); needs the causal mask"
    )


def task_help(*, training: bool = False) -> str:
    """The `--task` help line (`training`: with the LM mixing ratio and the RULER training rows)."""
    names = TASKS.help_text()
    if not training:
        return f"retrieval task, NAME[,option=value...]: {names} (see `lextra list`)"
    return (
        f"training task spec, NAME[:RATIO][,option=value...] (RATIO of task rows, the rest LM windows; NAME+lm = 0.5): "
        f"{names}, or ruler.niah / ruler.TASK (RULER prompts, evaluated with `lextra ruler`)"
    )


def ruler_task_help() -> str:
    return (
        f"'all' or RULER tasks, each TASK[,key=value...], repeatable or a list (e.g. niah_single_1;vt,hops=2): "
        f"{RULER_TASKS.help_text()}"
    )


def babilong_task_help() -> str:
    return (
        "'all' or BABILong tasks, each TASK[,facts=N,start=F,end=F,budget=N], repeatable or a list (e.g. "
        f"qa1;qa2,facts=20): {BABILONG_TASKS.help_text()}"
    )
